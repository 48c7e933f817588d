"""The lease table: which messages are invisible, and until when (pure, in memory).

A receive leases exactly the messages it returns; nothing is written to the
store for a first delivery. A lease ends when the message is deleted or its
deadline passes, after which the message is visible again. The messages a
receive is reading are held "in hand": their leases do not end before the
receive hands them out, however long the reads take, and nothing else may
lease them meanwhile. The table counts its leases per stripe (``by_stripe``):
a tenant's messages share a stripe, so that is what a tenant holds in flight.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterable

from dynamiq.core.ids import SEQ_BITS

__all__ = ["LeaseTable"]


class LeaseTable:
    """Leases of one queue on one node, keyed by message id."""

    def __init__(self) -> None:
        self._deadline: dict[int, float] = {}
        # (deadline, seq, ids): one entry per acquired batch; an id whose lease
        # was released or renewed since is skipped when its entry comes up.
        self._heap: list[tuple[float, int, tuple[int, ...]]] = []
        self._entries = 0
        self._held = 0  # ids in the heap, live or stale
        self._in_hand: set[int] = set()
        self._overdue: set[int] = set()  # in hand when their deadline came
        self.by_stripe: Counter[int] = Counter()  # leases per stripe (live or lapsed)

    def __len__(self) -> int:
        return len(self._deadline)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._deadline

    def acquire(self, ids: Iterable[int], now: float, timeout: float) -> list[int]:
        """Lease the ids that are not leased now; return those, in the given order."""
        deadline = now + timeout
        taken: list[int] = []
        in_hand, by_stripe = self._in_hand, self.by_stripe
        for message_id in ids:
            current = self._deadline.get(message_id)
            if current is not None and (current > now or message_id in in_hand):
                continue
            if current is None:
                by_stripe[message_id >> SEQ_BITS] += 1
            self._deadline[message_id] = deadline
            taken.append(message_id)
        self._schedule(deadline, taken)
        return taken

    def take(self, ids: Iterable[int], now: float, timeout: float) -> list[int]:
        """Lease the ids that are not leased now, as ``acquire``, and hold them in hand
        until ``hand_out`` (or ``release``): their leases do not end meanwhile."""
        taken = self.acquire(ids, now, timeout)
        self._in_hand.update(taken)
        return taken

    def hand_out(self, ids: Iterable[int], now: float, restart: float | None = None) -> None:
        """Let go of ids taken in hand. With ``restart``, their leases run that many
        seconds from now (the reads took long); else as taken, ending at the next
        ``expire`` if their deadline came while they were in hand."""
        deadlines = self._deadline
        for message_id in ids:
            self._in_hand.discard(message_id)
            overdue = message_id in self._overdue
            self._overdue.discard(message_id)
            deadline = deadlines.get(message_id)
            if deadline is None:
                continue
            if restart is not None:
                deadline = deadlines[message_id] = now + restart
            elif not overdue:
                continue
            self._schedule(deadline, [message_id])

    def extend(self, ids: Iterable[int], now: float, timeout: float) -> list[int]:
        """Move the deadline of live leases to ``now + timeout``; return the ids extended."""
        deadline = now + timeout
        extended = [i for i in ids if self._deadline.get(i, -math.inf) > now]
        for message_id in extended:
            self._deadline[message_id] = deadline
        self._schedule(deadline, extended)
        return extended

    def hold(self, ids: Iterable[int], now: float, timeout: float) -> None:
        """Lease ``ids`` until ``now + timeout`` at least: a lease held here already
        that ends sooner is moved to then, one that ends later stays (a lease
        another node made, taken over, outlasts what this node knew of it)."""
        deadline = now + timeout
        later = [i for i in ids if self._deadline.get(i, -math.inf) < deadline]
        for message_id in later:
            if message_id not in self._deadline:
                self.by_stripe[message_id >> SEQ_BITS] += 1
            self._deadline[message_id] = deadline
        self._schedule(deadline, later)

    def _schedule(self, deadline: float, ids: list[int]) -> None:
        if ids:
            self._entries += 1
            heapq.heappush(self._heap, (deadline, self._entries, tuple(ids)))
            self._held += len(ids)
            self._compact()

    def deadline(self, message_id: int) -> float | None:
        """Return when the lease on ``message_id`` ends (it may have passed), if leased."""
        return self._deadline.get(message_id)

    def release(self, ids: Iterable[int]) -> None:
        """End the leases of ``ids`` (deleted messages), in hand or not."""
        if self._in_hand:
            ids = list(ids)
            self._in_hand.difference_update(ids)
            self._overdue.difference_update(ids)
        for message_id in ids:
            if self._deadline.pop(message_id, None) is not None:
                self._uncount(message_id)

    def held_in(self, lo: int, hi: int, now: float) -> list[tuple[int, float]]:
        """Return ``(id, deadline)`` of the live leases on ids in ``[lo, hi]``."""
        return [(i, d) for i, d in self._deadline.items() if lo <= i <= hi and d > now]

    def release_all(self) -> list[int]:
        """End every lease; return the ids that were leased."""
        ids = list(self._deadline)
        self._deadline.clear()
        self._heap.clear()
        self._held = 0
        self._in_hand.clear()
        self._overdue.clear()
        self.by_stripe.clear()
        return ids

    def expire(self, now: float) -> list[int]:
        """End the leases whose deadline has passed, but those in hand; return their ids."""
        expired: list[int] = []
        heap, leases, in_hand = self._heap, self._deadline, self._in_hand
        while heap and heap[0][0] <= now:
            deadline, _, ids = heapq.heappop(heap)
            self._held -= len(ids)
            for message_id in ids:
                if leases.get(message_id) != deadline:
                    continue
                if message_id in in_hand:
                    self._overdue.add(message_id)
                else:
                    del leases[message_id]
                    self._uncount(message_id)
                    expired.append(message_id)
        return expired

    def _uncount(self, message_id: int) -> None:
        stripe = message_id >> SEQ_BITS
        left = self.by_stripe[stripe] - 1
        if left:
            self.by_stripe[stripe] = left
        else:
            del self.by_stripe[stripe]

    def next_deadline(self) -> float | None:
        """Return the earliest deadline that may still be live, if any."""
        return self._heap[0][0] if self._heap else None

    def _compact(self) -> None:
        # Deleted messages leave stale ids in the heap until their deadline;
        # rebuild when they outnumber live ones so memory follows in-flight
        # messages, not throughput.
        if self._held > 2 * len(self._deadline) + 1024:
            by_deadline: dict[float, list[int]] = {}
            for message_id, deadline in self._deadline.items():
                by_deadline.setdefault(deadline, []).append(message_id)
            self._heap = [(d, i, tuple(ids)) for i, (d, ids) in enumerate(by_deadline.items())]
            heapq.heapify(self._heap)
            self._held = len(self._deadline)
