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
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from dynamiq.client import Client
from dynamiq.errors import DynamiqError
from dynamiq.models import Outgoing

POISON = "poison-"

__all__ = ["Ledger", "Report", "Workload"]


@dataclass
class Ledger:
    """What the clients saw, shared by their threads (guarded by ``lock``)."""

    acked: set[int] = field(default_factory=set)
    delivered: Counter[int] = field(default_factory=Counter)
    bodies: dict[int, str] = field(default_factory=dict)  # acknowledged id -> body
    deleted: set[str] = field(default_factory=set)  # bodies whose delete found them
    dead: Counter[str] = field(default_factory=Counter)  # bodies in the dead-letter queue
    failed_publishes: int = 0
    failed_calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

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
        ]

    @property
    def failed(self) -> bool:
        """Whether the check failed: a message lost, in both queues, or poison astray."""
        return bool(self.lost or self.in_both or self.poison_astray)


class Workload:
    """Producers and consumers in threads, each with its own client over every node.

    Args:
        urls: the nodes; clients fail over between them.
        queue: an existing queue.
        rate: messages per second all producers aim for together.
        batch: messages per publish.
        consumers: consumer threads (each receives up to 50 and deletes them).
        visibility: lease seconds for each receive.
        poison_every: every n-th message is never deleted (0: none); it must
            end in ``dead_letter_queue``, the queue's.
        delay_every: every n-th message (offset by one) is published with a
            delay of ``delay_seconds`` (0: none).
    """

    def __init__(
        self,
        urls: Sequence[str],
        queue: str,
        rate: float = 1000.0,
        batch: int = 20,
        producers: int = 1,
        consumers: int = 2,
        visibility: float = 5.0,
        poison_every: int = 0,
        delay_every: int = 0,
        delay_seconds: float = 1.0,
        dead_letter_queue: str | None = None,
    ) -> None:
        self.urls = list(urls)
        self.queue = queue
        self._poison_every = poison_every
        self._delay_every = delay_every
        self._delay = delay_seconds
        self._dead_letter_queue = dead_letter_queue
        self.ledger = Ledger()
        self._interval = batch * producers / rate
        self._batch = batch
        self._visibility = visibility
        self._stop = threading.Event()
        self._consuming = threading.Event()
        self._consuming.set()
        self._threads = [
            threading.Thread(target=self._produce, args=(i,), daemon=True) for i in range(producers)
        ] + [threading.Thread(target=self._consume, daemon=True) for _ in range(consumers)]

    def start(self) -> Workload:
        """Start every thread."""
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop producing and consuming; wait for the threads."""
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _client(self) -> Client:
        return Client(self.urls, timeout=5.0, rounds=20, backoff=0.05)

    def _produce(self, index: int) -> None:
        count = 0
        next_at = time.monotonic()
        with self._client() as client:
            while not self._stop.is_set():
                bodies = [self._body(index, count + i) for i in range(self._batch)]
                count += self._batch
                try:
                    ids = client.publish(self.queue, [self._outgoing(b) for b in bodies])
                except DynamiqError:
                    with self.ledger.lock:
                        self.ledger.failed_publishes += 1
                else:
                    with self.ledger.lock:
                        self.ledger.acked.update(ids)
                        self.ledger.bodies.update(zip(ids, bodies, strict=True))
                next_at += self._interval
                time.sleep(max(0.0, next_at - time.monotonic()))

    def _body(self, producer: int, n: int) -> str:
        poison = self._poison_every and n % self._poison_every == 0
        return f"{POISON if poison else ''}p{producer}-{n}"

    def _outgoing(self, body: str) -> str | Outgoing:
        n = int(body.rpartition("-")[2])
        if self._delay_every and n % self._delay_every == 1:
            return Outgoing(body.encode(), delay_seconds=self._delay)
        return body

    def _consume(self) -> None:
        with self._client() as client:
            while not self._stop.is_set():
                self._consume_once(client, wait=0.5)

    def _consume_once(self, client: Client, wait: float) -> int:
        try:
            got = client.receive(
                self.queue, 50, wait_seconds=wait, visibility_timeout=self._visibility
            )
        except DynamiqError:
            with self.ledger.lock:
                self.ledger.failed_calls += 1
            return 0
        if not got:
            return 0
        with self.ledger.lock:
            self.ledger.delivered.update(m.id for m in got)
        done = [m for m in got if not m.body.startswith(POISON.encode())]
        try:
            existed = set(client.delete(self.queue, [m.id for m in done])) if done else set()
        except DynamiqError:  # the lease ends and the messages come back: at-least-once
            with self.ledger.lock:
                self.ledger.failed_calls += 1
        else:
            with self.ledger.lock:
                self.ledger.deleted.update(m.body.decode() for m in done if m.id in existed)
        return len(got)

    def drain(self, timeout: float = 60.0) -> bool:
        """Receive and delete until the store holds nothing; False if time ran out.

        Waits out leases lost with a node (they come back after the
        visibility timeout at most).
        """
        deadline = time.monotonic() + timeout
        with self._client() as client:
            while time.monotonic() < deadline:
                if self._consume_once(client, wait=0.2) == 0 and self._empty(client):
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
                got = client.receive(queue, 50, visibility_timeout=5)
                if not got:
                    return int(client.queue(queue)["stats"]["depth"]) == 0
                with self.ledger.lock:
                    self.ledger.dead.update(m.body.decode() for m in got if m.id not in seen)
                seen.update(m.id for m in got)
                client.delete(queue, [m.id for m in got])
            except DynamiqError:
                continue
        return False

    def _empty(self, client: Client) -> bool:
        """Whether the store holds nothing of the queue (False when no node answers)."""
        try:
            return int(client.queue(self.queue)["stats"]["depth"]) == 0
        except DynamiqError:
            return False
