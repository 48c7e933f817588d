"""Steady publish/receive/delete load on a cluster, and the total-queue check of what it saw.

A Python take on Jepsen's total-queue checker: every id whose publish was
acknowledged must be delivered at least once (``lost`` must be 0); ids
delivered more than once are counted (``duplicated``: allowed, at-least-once);
ids delivered that no acknowledgement named come from publishes whose answer
was lost (``unacknowledged``). Used by ``bench.chaos`` and the cluster tests.

With a dead-letter queue, a share of the messages is poison (never deleted:
each must end in the dead-letter queue once its receives run out, and is
counted delivered there) and a share is delayed; ``in_both`` counts messages
that were deleted from the queue and also reached the dead-letter queue
(must be 0), ``poison_astray`` poison messages that never reached it.

With groups, message ``n`` belongs to group ``n % groups`` and the check
follows each group's deliveries in the order consumers saw them: a delivery
of an earlier message than the group's newest one so far is an order
violation (must be 0), since a group's messages come in order and only the
one in flight may come again (a message skipped for good is lost).

A delivery answered before an earlier lease on the same message could have
ended is a double lease (must be 0): the earlier lease was made no sooner
than its receive was sent, and lasts its visibility timeout from then; the
later one was made no later than its answer came. Every consumer deletes
what it receives (poison aside) and never ends a lease early, so two such
deliveries mean two live leases at once, whatever the nodes say.

With deduplication every message carries its body as its dedup id, a failed
publish is retried with the same ids until it is acknowledged, and every
``repeat_every``-th batch is published twice on purpose; a body found under
more than one id was stored twice (must be 0).

Over many queues (a queue per tenant), each batch goes to the next queue in
turn and the consumers receive from the queues that still owe them messages;
the ledger names a message by its queue and id.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from dynamiq.client import Client
from dynamiq.errors import DynamiqError
from dynamiq.models import Message, Outgoing
from dynamiq.testing.crew import Crew

POISON = "poison-"
EXAMPLES = 20  # failures of the checks kept as examples

__all__ = ["Ledger", "Report", "Workload"]

# What names a message in the ledger: its id, or over many queues (queue, id).
Key = Hashable


class _Lease(NamedTuple):
    """A receive that leased: when it was sent and answered (monotonic), through which node."""

    asked: float
    answered: float
    by: str

    def __str__(self) -> str:
        return f"(asked {self.asked:.2f}, answered {self.answered:.2f} through {self.by or '?'})"


_NEVER = (0.0, _Lease(0.0, 0.0, ""))


@dataclass
class Ledger:
    """What the clients saw, shared by their threads (guarded by ``lock``)."""

    acked: set[Key] = field(default_factory=set)
    delivered: Counter[Key] = field(default_factory=Counter)
    bodies: dict[Key, str] = field(default_factory=dict)  # acknowledged message -> body
    deleted: set[str] = field(default_factory=set)  # bodies whose delete found them
    dead: Counter[str] = field(default_factory=Counter)  # bodies in the dead-letter queue
    failed_publishes: int = 0
    failed_calls: int = 0
    stored_as: defaultdict[str, set[Key]] = field(default_factory=lambda: defaultdict(set))
    # group -> its last receive's first n, the newest n delivered, that receive, that message
    last_in_group: dict[str, tuple[int, int, int, Key]] = field(default_factory=dict)
    order_violations: int = 0
    several_of_a_group: int = 0  # receives that brought two or more messages of one group
    # -> the earliest its last lease ends, and that lease: asked, answered, through
    leased_until: dict[Key, tuple[float, _Lease]] = field(default_factory=dict)
    double_leases: int = 0
    # The first few failures of the order and lease checks, as lines to read beside
    # the faults' times (monotonic seconds).
    examples: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def delivered_in_group(
        self, group: str | None, expected: str, n: int, message_id: Key = 0, receive: int = 0
    ) -> None:
        """Note that message ``n`` (id ``message_id``) of group ``expected`` arrived as
        part of ``group``, in ``receive`` (a number per receive call).

        A receive brings a group's messages in ascending order, starting no
        earlier than the previous receive of the group started: the messages
        of that one may come again (their leases lapsed), never one before
        them. Call with ``lock`` held, in the order the deliveries were seen.
        """
        first, last, seen_in, last_id = self.last_in_group.get(expected, (-1, -1, -1, 0))
        same = receive == seen_in
        if group != expected or (n <= last if same else n < first):
            self.order_violations += 1
            before = self.delivered[message_id] - 1
            self._example(
                f"group {expected}: message {n} (id {message_id}, delivered {before} times "
                f"before) after {last} (id {last_id}) (as part of {group})"
            )
        elif same:
            if first == last:
                self.several_of_a_group += 1
            self.last_in_group[expected] = (first, n, receive, message_id)
        else:
            self.last_in_group[expected] = (n, n, receive, message_id)

    def leased(
        self, ids: Sequence[Key], asked: float, answered: float, seconds: float, by: str = ""
    ) -> None:
        """Note deliveries of ``ids`` by a receive sent at ``asked`` and answered at
        ``answered`` (monotonic) through the node ``by`` with leases of ``seconds``;
        count those that came while an earlier lease on the same id was surely live.
        Call with ``lock`` held."""
        until, lease = self.leased_until, _Lease(asked, answered, by)
        for mid in ids:
            ends, before = until.get(mid, _NEVER)
            if answered < ends:
                self.double_leases += 1
                self._example(
                    f"id {mid}: leased again {ends - answered:.2f} s early {lease}; before {before}"
                )
            until[mid] = (asked + seconds, lease)

    def _example(self, what: str) -> None:
        if len(self.examples) < EXAMPLES:
            self.examples.append(f"{time.monotonic():.2f} {what}")

    def report(self) -> Report:
        """Check the ledger: lost, duplicated, unacknowledged."""
        with self.lock:
            seen = set(self.delivered)
            missing = {mid for mid in self.acked - seen if self.bodies.get(mid) not in self.dead}
            poison = {b for b in self.bodies.values() if b.startswith(POISON)}
            return Report(
                acked=len(self.acked),
                delivered=len(seen),
                lost=len(missing),
                duplicated=sum(n - 1 for n in self.delivered.values() if n > 1),
                unacknowledged=len(seen - self.acked),
                failed_publishes=self.failed_publishes,
                dead_lettered=len(self.dead),
                dead_duplicated=sum(n - 1 for n in self.dead.values() if n > 1),
                in_both=len(self.deleted & set(self.dead)),
                poison_astray=len(poison - set(self.dead)),
                order_violations=self.order_violations,
                several_of_a_group=self.several_of_a_group,
                double_leases=self.double_leases,
                stored_twice=sum(1 for ids in self.stored_as.values() if len(ids) > 1),
            )


@dataclass(frozen=True)
class Report:
    """The verdict of the total-queue check."""

    acked: int
    delivered: int
    lost: int
    duplicated: int
    unacknowledged: int
    failed_publishes: int
    dead_lettered: int = 0
    dead_duplicated: int = 0
    in_both: int = 0
    poison_astray: int = 0
    order_violations: int = 0
    several_of_a_group: int = 0
    double_leases: int = 0
    stored_twice: int = 0

    def lines(self) -> list[str]:
        """Return the figures, one per line."""
        return [
            f"published and acknowledged  {self.acked}",
            f"delivered (distinct)        {self.delivered}",
            f"lost                        {self.lost}",
            f"duplicated deliveries       {self.duplicated}",
            f"delivered, not acknowledged {self.unacknowledged}",
            f"publish calls that failed   {self.failed_publishes}",
            f"dead-lettered (distinct)    {self.dead_lettered}",
            f"dead-lettered twice         {self.dead_duplicated}",
            f"deleted and dead-lettered   {self.in_both}",
            f"poison not dead-lettered    {self.poison_astray}",
            f"order violations in groups  {self.order_violations}",
            f"receives of several of a group {self.several_of_a_group}",
            f"double leases               {self.double_leases}",
            f"dedup ids stored twice      {self.stored_twice}",
        ]

    @property
    def failed(self) -> bool:
        """Whether the check failed: a message lost, in both queues, poison astray,
        a group out of order, leased twice at once or a dedup id stored twice."""
        return bool(
            self.lost
            or self.in_both
            or self.poison_astray
            or self.order_violations
            or self.double_leases
            or self.stored_twice
        )


class Workload:
    """Producers and consumers in threads, each with its own client over every node.

    Args:
        urls: the nodes; clients fail over between them.
        queue: an existing queue, or several (each batch goes to the next in turn).
        rate: messages per second all producers aim for together.
        batch: messages per publish.
        consumers: consumer threads (each receives up to 50 and deletes them).
        visibility: lease seconds for each receive.
        poison_every: every n-th message is never deleted (0: none); it must
            end in ``dead_letter_queue``, the queue's.
        delay_every: every n-th message (offset by one) is published with a
            delay of ``delay_seconds`` (0: none).
        groups: a producer's message n belongs to its group ``n % groups`` (0: none).
        dedup: every message carries its body as its dedup id; a failed
            publish is retried until acknowledged.
        repeat_every: with ``dedup``, every n-th batch is published twice.
    """

    def __init__(
        self,
        urls: Sequence[str],
        queue: str | Sequence[str],
        rate: float = 1000.0,
        batch: int = 20,
        producers: int = 1,
        consumers: int = 2,
        visibility: float = 5.0,
        poison_every: int = 0,
        delay_every: int = 0,
        delay_seconds: float = 1.0,
        dead_letter_queue: str | None = None,
        groups: int = 0,
        dedup: bool = False,
        repeat_every: int = 0,
    ) -> None:
        self.urls = list(urls)
        self.queues = [queue] if isinstance(queue, str) else list(queue)
        # queue -> messages acknowledged and not deleted yet (under the ledger's lock)
        self._owed: Counter[str] = Counter()
        self._groups = groups
        self._dedup = dedup
        self._repeat_every = repeat_every if dedup else 0
        self._poison_every = poison_every
        self._delay_every = delay_every
        self._delay = delay_seconds
        self._dead_letter_queue = dead_letter_queue
        self.ledger = Ledger()
        self._receives = 0  # receive calls so far (under the ledger's lock)
        self._interval = batch * producers / rate
        self._batch = batch
        self._visibility = visibility
        self._crew = Crew()
        self._stop = self._crew.stopping
        self._consuming = threading.Event()
        self._consuming.set()
        for i in range(producers):
            self._crew.add(self._produce, i)
        for _ in range(consumers):
            self._crew.add(self._consume)

    def start(self) -> Workload:
        """Start every thread."""
        self._crew.start()
        return self

    def stop(self) -> None:
        """Stop producing and consuming; wait for the threads."""
        self._crew.stop(30)

    def _client(self) -> Client:
        return Client(self.urls, timeout=5.0, rounds=20, backoff=0.05)

    def _key(self, queue: str, message_id: int) -> Key:
        """What names a message in the ledger."""
        return message_id if len(self.queues) == 1 else (queue, message_id)

    def _produce(self, index: int) -> None:
        count = 0
        next_at = time.monotonic()
        with self._client() as client:
            while not self._stop.is_set():
                bodies = [self._body(index, count + i) for i in range(self._batch)]
                count += self._batch
                batches = count // self._batch
                queue = self.queues[(index + batches) % len(self.queues)]
                again = self._repeat_every and batches % self._repeat_every == 0
                sends = 2 if again else 1
                for _ in range(sends):
                    self._publish(client, queue, bodies)
                next_at += self._interval
                time.sleep(max(0.0, next_at - time.monotonic()))

    def _publish(self, client: Client, queue: str, bodies: list[str]) -> None:
        """Publish one batch; with deduplication, again until it is acknowledged."""
        while True:
            try:
                ids = client.publish(queue, [self._outgoing(b) for b in bodies])
            except DynamiqError:
                with self.ledger.lock:
                    self.ledger.failed_publishes += 1
                if self._dedup and not self._stop.is_set():
                    continue
                return
            keys = [self._key(queue, mid) for mid in ids]
            with self.ledger.lock:
                fresh = set(keys) - self.ledger.acked
                self.ledger.acked.update(keys)
                self.ledger.bodies.update(zip(keys, bodies, strict=True))
                self._owed[queue] += len(fresh)
                if self._dedup:
                    for body, key in zip(bodies, keys, strict=True):
                        self.ledger.stored_as[body].add(key)
            return

    def _body(self, producer: int, n: int) -> str:
        poison = self._poison_every and n % self._poison_every == 0
        return f"{POISON if poison else ''}p{producer}-{n}"

    def _outgoing(self, body: str) -> str | Outgoing:
        n = int(body.rpartition("-")[2])
        delay = self._delay if self._delay_every and n % self._delay_every == 1 else None
        group = self._group_of(body)
        if not (delay or group or self._dedup):
            return body
        return Outgoing(
            body.encode(),
            delay_seconds=delay,
            group=group,
            dedup_id=body if self._dedup else None,
        )

    def _group_of(self, body: str) -> str | None:
        """Return the group of a body ``p<producer>-<n>``: its producer's ``n % groups``."""
        if not self._groups:
            return None
        producer, _, n = body.removeprefix(POISON).rpartition("-")
        return f"{producer}.g{int(n) % self._groups}"

    def _consume(self) -> None:
        with self._client() as client:
            if len(self.queues) == 1:
                while not self._stop.is_set():
                    self._consume_once(client, self.queues[0], wait=0.5)
                return
            spread = random.Random()  # its own: the chaos command's faults follow their seed
            while not self._stop.is_set():
                with self.ledger.lock:
                    owing = [q for q, n in self._owed.items() if n > 0]
                spread.shuffle(owing)  # the consumers spread over them
                for queue in owing:
                    self._consume_once(client, queue, wait=0.0)
                if not owing:
                    self._stop.wait(0.05)

    def _consume_once(self, client: Client, queue: str, wait: float) -> int:
        asked = time.monotonic()
        try:
            got = client.receive(queue, 50, wait_seconds=wait, visibility_timeout=self._visibility)
        except DynamiqError:
            with self.ledger.lock:
                self.ledger.failed_calls += 1
            return 0
        answered = time.monotonic()
        if not got:
            return 0
        keys = {m.id: self._key(queue, m.id) for m in got}
        with self.ledger.lock:
            self.ledger.leased(list(keys.values()), asked, answered, self._visibility, client.url)
            self.ledger.delivered.update(keys.values())
            self._receives += 1
            for m in got:
                self._check(m, keys[m.id], self._receives)
        done = [m for m in got if not m.body.startswith(POISON.encode())]
        try:
            existed = set(client.delete(queue, [m.id for m in done])) if done else set()
        except DynamiqError:  # the lease ends and the messages come back: at-least-once
            with self.ledger.lock:
                self.ledger.failed_calls += 1
        else:
            with self.ledger.lock:
                found = [m for m in done if m.id in existed]
                self.ledger.deleted.update(m.body.decode() for m in found)
                self._owed[queue] -= sum(keys[m.id] in self.ledger.acked for m in found)
        return len(got)

    def _check(self, m: Message, key: Key, receive: int) -> None:
        """Follow a delivery's group and what it was stored as (``lock`` held)."""
        body = m.body.decode()
        if self._dedup:
            self.ledger.stored_as[body].add(key)
        expected = self._group_of(body)
        if expected is not None:
            n = int(body.rpartition("-")[2])
            self.ledger.delivered_in_group(m.group, expected, n, key, receive)

    def drain(self, timeout: float = 60.0) -> bool:
        """Receive and delete until the store holds nothing of any queue; False if time
        ran out.

        Waits out leases lost with a node (they come back after the
        visibility timeout at most).
        """
        deadline = time.monotonic() + timeout
        pending = deque(self.queues)
        with self._client() as client:
            while pending and time.monotonic() < deadline:
                queue = pending.popleft()
                wait = 0.2 if not pending else 0.0  # only the last one is waited on
                if self._consume_once(client, queue, wait) or not self._empty(client, queue):
                    pending.append(queue)
            if not pending:
                return self._drain_dead_letters(client, deadline)
        return False

    def _drain_dead_letters(self, client: Client, deadline: float) -> bool:
        """Receive and delete every message of the dead-letter queue, noting its body."""
        queue = self._dead_letter_queue
        if queue is None:
            return True
        seen: set[int] = set()  # a copy received again (its delete failed) counts once
        while time.monotonic() < deadline:
            try:
                got = client.receive(queue, 50, visibility_timeout=5, wait_seconds=0.2)
                if not got:
                    # Nothing visible: done once nothing is stored either (a message
                    # still leased, by a receive whose delete failed, comes back)
                    if int(client.queue(queue)["stats"]["depth"]) == 0:
                        return True
                    continue
                with self.ledger.lock:
                    self.ledger.dead.update(m.body.decode() for m in got if m.id not in seen)
                seen.update(m.id for m in got)
                client.delete(queue, [m.id for m in got])
            except DynamiqError:
                continue
        return False

    def _empty(self, client: Client, queue: str) -> bool:
        """Whether the store holds nothing of the queue (False when no node answers)."""
        try:
            return int(client.queue(queue)["stats"]["depth"]) == 0
        except DynamiqError:
            return False
