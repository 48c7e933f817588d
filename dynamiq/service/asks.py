"""Verbs that reach the peers: a receive filled from their slices, lease changes and
deletes sent to the member serving each id, publishes told to the slices' owners.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any

from dynamiq.cluster.base import Member
from dynamiq.core.queues import QueueService
from dynamiq.errors import PeerUnavailable
from dynamiq.models import LocalQueueStats, Message, Outgoing, ReceiveRequest
from dynamiq.service.majority import Majority
from dynamiq.service.owners import by_owner, quietly, tell_owners
from dynamiq.service.reach import Reach
from dynamiq.service.watchers import PEER_POLL_SECONDS, Watchers

__all__ = ["PeerAsks", "Waiting", "waited"]

log = logging.getLogger("dynamiq.service")

# A peer that had no visible message (or did not answer) is not asked again
# by this node for that queue for this long, unless the node's board says a
# sibling worker's share of the queue changed since: receives of a queue the
# peers hold nothing of do not pay a round trip to every peer each time, and
# what a sibling stores is received through this worker at once. One that
# gave some, if fewer than asked, is asked again by the next receive: an
# ordered group's next messages are there as soon as those before are
# deleted, and a group may give fewer than a receive asked.
PEER_DRY_SECONDS = 0.25

# How a receive that has to wait is run: awaited, or as the HTTP layer watches it.
Waiting = Callable[[Coroutine[Any, Any, list[Message]]], Awaitable[list[Message]]]


async def waited(receive: Coroutine[Any, Any, list[Message]]) -> list[Message]:
    """Run a waiting receive to its end."""
    return await receive


class PeerAsks:
    """This node's verbs, carried to the members that serve what they touch."""

    def __init__(
        self, reach: Reach, majority: Majority, queues: QueueService, watchers: Watchers
    ) -> None:
        self._reach = reach
        self._membership = reach.membership
        self._majority = majority
        self._queues = queues
        self._watchers = watchers
        # (queue, member) -> when to ask again, and the board's mark when it was dry
        self._dry: dict[tuple[str, str], tuple[float, int]] = {}
        # (queue, member) -> the ask under way, resolved with whether it found
        # nothing, and the board's mark when it was made
        self._asking: dict[tuple[str, str], tuple[asyncio.Future[bool], int]] = {}

    async def receive(self, ask: ReceiveRequest, waiting: Waiting = waited) -> list[Message]:
        """Lease what is visible now (``look``); when nothing is, ``wait`` for it, run
        through ``waiting`` (which may watch it, or refuse it)."""
        got = await self.look(ask)
        return got if got or ask.wait_seconds <= 0 else await waiting(self.wait(ask))

    async def look(self, ask: ReceiveRequest) -> list[Message]:
        """Lease what is visible now: from this node's slice, then from the peers' when
        that is not enough. The peers a receive that waits next finds dry tell it
        of their next messages (``news``)."""
        queue, want, lease = ask.queue, ask.max_messages, ask.visibility_timeout
        if self._local_only():
            return await self._queues.receive(queue, want, lease)
        epoch = self._majority.epoch()
        got = await self._queues.receive(queue, want, lease)
        if len(got) < want:
            got += await self._from_peers(queue, want - len(got), lease, ask.wait_seconds > 0)
        return self._held(got, epoch)

    async def wait(self, ask: ReceiveRequest) -> list[Message]:
        """Lease what comes within ``wait_seconds``, after a ``look`` found nothing: wait
        here first (this node's slice was just looked at and the peers just asked),
        then ask the peers again, every ``PEER_POLL_SECONDS``."""
        queue, want, lease = ask.queue, ask.max_messages, ask.visibility_timeout
        if self._local_only():
            return await self._queues.receive(queue, want, lease, ask.wait_seconds)
        deadline, epoch = time.monotonic() + ask.wait_seconds, self._majority.epoch()
        got = await self._queues.receive(
            queue, want, lease, min(ask.wait_seconds, PEER_POLL_SECONDS)
        )
        while True:
            if len(got) < want:
                waits = deadline > time.monotonic()
                got += await self._from_peers(queue, want - len(got), lease, waits)
            left = deadline - time.monotonic()
            if got or left <= 0 or self._majority.leaving:
                return self._held(got, epoch)
            got = await self._queues.receive(queue, want, lease, min(left, PEER_POLL_SECONDS))

    def _local_only(self) -> bool:
        """Whether a receive looks at this node's slice only (no peers, or leaving);
        raise ``NoMajority`` when it may not look at all."""
        if self._reach.client is None or self._majority.leaving:
            return True
        if not self._majority.may_serve():
            raise self._majority.refusal()
        return False

    def _held(self, got: list[Message], epoch: int) -> list[Message]:
        """``got``, unless this node paused since ``epoch`` (while asking the peers, say):
        then the leases are void. They are not given back: the ids may be leased anew
        by whoever serves them now, and giving back would end that lease; they lapse."""
        return got if self._majority.holds(epoch) else []

    def news(self, queue: str, member: str) -> None:
        """``member`` stored messages of ``queue``, which a receive here waits on: ask it."""
        self._dry.pop((queue, member), None)
        self._queues.peer_news(queue)

    async def _from_peers(
        self, queue: str, want: int, visibility_timeout: float | None, waits: bool
    ) -> list[Message]:
        """Lease up to ``want`` from the peers not found dry lately; a receive that
        ``waits`` asks those with none to tell it of their next (``news``)."""
        out: list[Message] = []
        now, mark = time.monotonic(), self._reach.mark(queue)
        peers = [m for m in self._reach.peers() if not self._still_dry(queue, m.name, now, mark)]
        random.shuffle(peers)
        waiter = self._reach.me() if waits else ""
        for member in peers:
            out += await self._ask(member, queue, want - len(out), visibility_timeout, waiter)
            if len(out) >= want:
                break
        return out

    def _still_dry(self, queue: str, member: str, now: float, mark: int) -> bool:
        """Whether ``member`` had nothing of ``queue`` lately, and the board has not
        moved since (``mark``)."""
        dry = self._dry.get((queue, member))
        return dry is not None and dry[0] > now and dry[1] == mark

    async def _ask(
        self,
        member: Member,
        queue: str,
        want: int,
        visibility_timeout: float | None,
        waiter: str,
    ) -> list[Message]:
        """Lease up to ``want`` of ``queue`` from ``member``'s slice.

        A receive that would ask while another ask of the same member for the same
        queue is under way waits for that one's answer, and asks only if it was not
        dry: a burst of receives on a queue the peers hold nothing of asks each peer
        once, not once per receive.
        """
        client = self._reach.client
        assert client is not None  # only a node with peers asks them
        key, mark = (queue, member.name), self._reach.mark(queue)  # the mark before the ask
        under_way = self._asking.get(key)
        if under_way is not None and under_way[1] == mark and await asyncio.shield(under_way[0]):
            return []
        dry = asyncio.get_running_loop().create_future()
        self._asking[key] = (dry, mark)
        got: list[Message] = []
        answered = False  # cancelled: not dry, those waiting ask themselves
        try:
            got = await client.receive(member, queue, want, visibility_timeout, waiter)
            answered = True
        except PeerUnavailable as exc:
            log.debug("receive from %s: %s", member.name, exc)
            answered = True
        finally:
            dry.set_result(answered and not got)
            if self._asking.get(key, (None,))[0] is dry:
                del self._asking[key]
        if not got:
            self._dry[key] = (time.monotonic() + PEER_DRY_SECONDS, mark)
        else:
            self._dry.pop(key, None)
        return got

    async def change_visibility(self, queue: str, ids: Sequence[int], seconds: float) -> list[int]:
        """Change leases where they are held: by the member serving each id."""
        client = self._reach.client
        if client is None:
            return await self._queues.change_visibility(queue, ids, seconds)
        mine, theirs = by_owner(self._membership, ids)
        if mine and seconds > 0 and not self._majority.may_serve():
            raise self._majority.refusal()
        changed = await self._queues.change_visibility(queue, mine, seconds)
        for member, owned in theirs:
            try:
                changed += await client.change_visibility(member, queue, owned, seconds)
            except PeerUnavailable as exc:
                log.debug("visibility at %s: %s", member.name, exc)
        return changed

    async def still_current(self, queue: str, deliveries: Sequence[tuple[int, int]]) -> list[int]:
        """Of ``(id, receive count)`` deliveries, the ids not delivered again since: the
        member serving each id last delivered it with that count, or never did
        (it restarted since, or does not answer: the delivery is taken as current)."""
        ids = [i for i, _ in deliveries]
        client = self._reach.client
        mine, theirs = by_owner(self._membership, ids) if client is not None else (ids, [])
        counts = dict(zip(mine, self._queues.deliveries(queue, mine), strict=True))
        for member, owned in theirs:
            assert client is not None  # only a node with peers has theirs
            try:
                got = await client.deliveries(member, queue, owned)
                counts.update(zip(owned, got, strict=True))
            except PeerUnavailable as exc:
                log.debug("deliveries at %s: %s", member.name, exc)
        return [i for i, count in deliveries if counts.get(i, 0) in (0, count)]

    async def delete(self, queue: str, ids: Sequence[int]) -> list[bool]:
        """Delete from the store; tell the members holding leases on the ids to let them
        go: this node's other workers before the answer (a group they serve moves on
        to its next message at once), other nodes meanwhile."""
        existed = await self._queues.delete(queue, ids)
        client = self._reach.client
        if client is not None:
            gone = [i for i, ok in zip(ids, existed, strict=True) if ok]
            told = []
            for member, owned in by_owner(self._membership, gone)[1]:
                release = quietly(client.release(member, queue, owned))
                if self._reach.sibling(member):
                    told.append(release)
                else:
                    self._reach.spawn(release)
            if told:
                await asyncio.gather(*told)
        return existed

    async def published(
        self,
        placed: Mapping[str, Sequence[int | None]],
        messages: Sequence[bytes | Outgoing],
    ) -> None:
        """Tell the members serving some of a publish's ids about them, before the
        publish is answered (``tell_owners``): per queue, the id of each of
        ``messages``, None where none was stored there.

        Raises:
            BackendUnavailable: a pinned message (an ordered group's, a dedup id's)
                lies in a slice no member could be told of in time.
        """
        client = self._reach.client
        if client is not None:
            self._watchers.tell(placed)
            await tell_owners(client, self._membership, placed, messages, self.serves)

    def serves(self, ids: Sequence[int]) -> bool:
        """Whether this node leases ``ids`` now, with the right to: no other node does,
        and its walks meet what is stored there."""
        serves = self._queues.serves
        return serves(min(ids)) and serves(max(ids)) and self._majority.may_serve()

    async def peer_stats(self, queues: list[str]) -> dict[str, LocalQueueStats]:
        """Sum the peers' own leases in flight and rates per queue (unreachable peers count 0)."""
        client = self._reach.client
        return await client.summed_stats(self._reach.peers(), queues) if client else {}
