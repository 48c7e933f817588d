"""The in-memory side of a queue on one node, and what a node reports of a queue."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field

from dynamiq.core.clock import Clock
from dynamiq.core.delivery.cursor import CURSOR_SECONDS, PartitionCursor
from dynamiq.core.delivery.fairness import ranks
from dynamiq.core.delivery.groups import Groups
from dynamiq.core.delivery.leases import LeaseTable
from dynamiq.core.delivery.partitions import Partition, PartitionSet
from dynamiq.keyspace import KeyRange
from dynamiq.models import HeldLease, LocalQueueStats, Message, QueueRecord

__all__ = ["QueueState", "QueueStats", "Stirred", "unseen"]

# Told the name of a queue whose messages may have become visible in this
# member's share (stored, offered again, their group moved on), once they are.
Stirred = Callable[[str], None]


def unseen(queue: str) -> None:
    """A stirring nobody watches."""


@dataclass(frozen=True, slots=True)
class QueueStats:
    """What a queue holds and how fast it moves, as this node sees it: its depth (the
    store's count, shared by the cluster), its partitions here, and what only this
    node knows (``here``: its leases, its rates, what it moved on since it started).

    With detail, ``oldest_age`` is the age in seconds of the oldest message due
    and ``delayed`` counts the messages not due yet.
    """

    depth: int
    partitions: int
    here: LocalQueueStats = field(default_factory=LocalQueueStats)
    oldest_age: float | None = None
    delayed: int = 0

    @property
    def in_flight(self) -> int:
        """Messages leased by this node now."""
        return self.here.in_flight

    @property
    def visible(self) -> int:
        """Messages stored, due and not leased."""
        return max(0, self.depth - self.in_flight - self.delayed)


class QueueState:
    """The in-memory side of one queue on this node: partitions, leases, waiters."""

    def __init__(
        self, record: QueueRecord, lo: int, hi: int, now: float, stirred: Stirred = unseen
    ) -> None:
        self.name = record.name
        self._stirred = stirred  # told whenever messages may have become visible here
        self.settings = record.settings
        self.partitions = PartitionSet(lo, hi, record.settings, now)
        self.leases = LeaseTable()
        self.groups = Groups()  # fronts of ordered groups, and who waits behind them
        # Leases that ended without a delete: the next delivery is a redelivery.
        self.lapsed: set[int] = set()
        # The metadata (receive count) each leased message was delivered with,
        # and the leases whose end the consumer set itself.
        self.counts: dict[int, tuple[int, int]] = {}  # (receive count, first received ms)
        # Counts of ended leases on their way to the store: a delivery meanwhile
        # counts on from them, not from the record it read.
        self.settling: dict[int, tuple[int, int]] = {}
        self.nacked: set[int] = set()
        # When the next delayed message seen by the last receive is due (monotonic).
        self.next_due: float | None = None
        # Messages this node dead-lettered, expired, redrove, per ``LIFECYCLE_EVENTS``.
        self.moved_on: Counter[str] = Counter()
        self.cursors: dict[int, PartitionCursor] = {}
        self.waiters: set[asyncio.Future[None]] = set()
        # Bumped by every notify: a receive that saw it move while it looked
        # looks again instead of waiting for a wake-up that already came.
        self.changes = 0
        # Bumped when a peer says it stored messages of the queue: a receive
        # waiting here stops waiting, so that its caller asks the peers.
        self.news = 0
        self.used = now  # when it was last asked for (``QueueStates.of``)
        self.fair = False  # whether a tenant's message was delivered here

    def quiet(self) -> bool:
        """Whether it holds nothing the store does not: no lease, no receive waiting or
        walking, no group front, no receive count not yet stored."""
        return not (
            self.leases
            or self.waiters
            or self.groups
            or self.counts
            or self.settling
            or self.nacked
            or self.partitions.busy()
        )

    def local_stats(self, rates: tuple[float, float, float]) -> LocalQueueStats:
        """What only this node knows of the queue: leases, ``rates`` (publishes,
        receives and deletes a second), what it moved on."""
        moved_on = self.moved_on
        return LocalQueueStats(
            len(self.leases),
            *rates,
            moved_on["dead_lettered"],
            moved_on["expired"],
            moved_on["redriven"],
        )

    def slice_moved(
        self, keyspace: KeyRange | None, now: float, owns: Callable[[str], bool]
    ) -> None:
        """The node's slice moved: walks start afresh over the new one, and the groups
        it no longer ``owns`` are forgotten (but for their messages leased here)."""
        self.cursors.clear()
        if keyspace is not None:
            self.partitions.set_slice(*keyspace, now)
        self.groups.forget(owns, self.leases)
        self.notify()

    def ranks(self) -> dict[int, int]:
        """The ranks a walk gives stripes (``fairness``): none unless the queue is fair."""
        return ranks(self.leases.by_stripe, len(self.leases)) if self.fair else {}

    def delivered(self, got: Sequence[Message]) -> int:
        """Return how many of a receive's messages came again after a lease lapsed, and
        note whether the queue has tenants."""
        if not self.fair and any(m.tenant is not None for m in got):
            self.fair = True
        if not self.lapsed:
            return 0
        again = [m.id for m in got if m.id in self.lapsed]
        self.lapsed.difference_update(again)
        return len(again)

    def cursor(self, part: Partition, now: float) -> PartitionCursor:
        cursor = self.cursors.get(part.index)
        if cursor is None or cursor.part is not part or now - cursor.born >= CURSOR_SECONDS:
            cursor = self.cursors[part.index] = PartitionCursor(part, now)
        return cursor

    def walk_afresh(self, part: Partition) -> None:
        """Start a partition's walk over, from what the store holds (a receive failed
        after its walk took ids, which would otherwise not come again until the
        cursor is replaced, while later ones of their groups do)."""
        self.cursors.pop(part.index, None)

    def published(self, ids: list[int]) -> bool:
        """Messages were stored under ``ids``: walks meet them, waiting receives wake.
        Return whether any receive was waiting."""
        self.partitions.wake(ids)
        ascending = sorted(ids)
        for cursor in self.cursors.values():
            cursor.touch(ascending)
        waited = bool(self.waiters)
        self.notify()
        return waited

    def release(self, ids: Sequence[int]) -> None:
        """End the leases on ``ids`` (their messages were deleted, dead-lettered or
        expired): their groups move on to the messages that waited."""
        self.leases.release(ids)
        if self.groups:
            waited = self.groups.ended(ids)
            if waited:
                self.offer_again(waited)
                self.notify()
        self.lapsed.difference_update(ids)
        counts = self.counts
        for message_id in ids:
            counts.pop(message_id, None)
        if self.nacked:
            self.nacked.difference_update(ids)

    def delivery_counts(self, ids: Sequence[int]) -> list[int]:
        """Per id, the receive count it was last delivered with here (0: not since it was
        deleted, or since this node took its slice)."""
        counts = self.counts
        return [counts[i][0] if i in counts else 0 for i in ids]

    def held_leases(self, lo: int, hi: int, now: float) -> list[HeldLease]:
        """Return the live leases on ids in ``[lo, hi]``, to hand them over."""
        return [
            HeldLease(mid, deadline - now, *self.counts.get(mid, (0, 0)), self.groups.group_of(mid))
            for mid, deadline in self.leases.held_in(lo, hi, now)
        ]

    def take_over(self, leases: Sequence[HeldLease], now: float) -> None:
        """Hold leases handed over by another node until they would end there."""
        for lease in leases:
            # a lease of its own may be here still, void (made across a pause) or
            # older: the one taken over is honoured to its end all the same
            self.leases.hold((lease.id,), now, lease.seconds_left)
            if lease.receive_count:
                self.counts[lease.id] = (lease.receive_count, lease.first_received_ms)
            if lease.group is not None:  # its group waits for it here now
                self.groups.taken_over(lease.group, lease.id)

    def stand_down(self) -> int:
        """Walk afresh when serving again (others may have served the slice meanwhile),
        keeping the leases: consumers hold them still. Return how many there are."""
        self.cursors.clear()
        return len(self.leases)

    def forget_leases(self) -> int:
        """Forget every lease and what was known of it; return how many there were."""
        dropped = len(self.leases.release_all())
        self.groups.clear()
        self.counts.clear()
        self.nacked.clear()
        self.cursors.clear()
        return dropped

    def expired(self, ids: list[int]) -> None:
        """Offer again messages whose lease lapsed (their next delivery is a redelivery),
        and those that wait behind them in a group no longer in flight."""
        self.lapsed.update(ids)
        if self.groups:
            ids = sorted([*ids, *self.groups.lapsed(ids, self.leases)])
        self.offer_again(ids)

    def offer_again(self, ids: list[int]) -> None:
        """Offer again messages a walk passed by (leased, or waiting in their group)."""
        if ids:
            self.partitions.wake(ids)
            for cursor in self.cursors.values():
                cursor.offer_again(ids)
            self._stirred(self.name)

    def unavailable(self) -> Container[int]:
        """What a walk passes by: leased messages, and those waiting in their group."""
        return _Either(self.leases, self.groups) if self.groups else self.leases

    def peer_news(self) -> None:
        """A peer stored messages of the queue in its slice: the receives waiting here
        return (with nothing), for their callers to ask the peers."""
        self.news += 1
        self._wake()

    def notify(self) -> None:
        """The queue changed here: wake the receives waiting on it, tell ``stirred``."""
        self._stirred(self.name)
        self._wake()

    def _wake(self) -> None:
        self.changes += 1
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()

    async def wait(self, seconds: float, clock: Clock) -> None:
        """Wait on ``clock`` for ``seconds``, or less if the queue changes first."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.add(waiter)
        try:
            await clock.sleep(seconds, waiter)
        finally:
            self.waiters.discard(waiter)


class _Either:
    """Ids in either of two containers."""

    __slots__ = ("_a", "_b")

    def __init__(self, a: Container[int], b: Container[int]) -> None:
        self._a, self._b = a, b

    def __contains__(self, item: object) -> bool:
        return item in self._a or item in self._b
