"""The lease table: which messages are invisible, and until when (pure, in memory).

A receive leases exactly the messages it returns; nothing is written to the
store for a first delivery. A lease ends when the message is deleted or its
deadline passes, after which the message is visible again.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

__all__ = ["LeaseTable"]


class LeaseTable:
    """Leases of one queue on one node, keyed by message id."""

    def __init__(self) -> None:
        self._deadline: dict[int, float] = {}
        # (deadline, id); entries go stale on release and are dropped lazily.
        self._heap: list[tuple[float, int]] = []

    def __len__(self) -> int:
        return len(self._deadline)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._deadline

    def acquire(self, ids: Iterable[int], now: float, timeout: float) -> list[int]:
        """Lease the ids that are not leased now; return those, in the given order."""
        deadline = now + timeout
        taken: list[int] = []
        for message_id in ids:
            current = self._deadline.get(message_id)
            if current is not None and current > now:
                continue
            self._deadline[message_id] = deadline
            heapq.heappush(self._heap, (deadline, message_id))
            taken.append(message_id)
        self._compact()
        return taken

    def release(self, ids: Iterable[int]) -> None:
        """End the leases of ``ids`` (deleted messages)."""
        for message_id in ids:
            self._deadline.pop(message_id, None)

    def release_all(self) -> list[int]:
        """End every lease; return the ids that were leased."""
        ids = list(self._deadline)
        self._deadline.clear()
        self._heap.clear()
        return ids

    def expire(self, now: float) -> list[int]:
        """End the leases whose deadline has passed; return their ids."""
        expired: list[int] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, message_id = heapq.heappop(heap)
            if self._deadline.get(message_id) == deadline:
                del self._deadline[message_id]
                expired.append(message_id)
        return expired

    def next_deadline(self) -> float | None:
        """Return the earliest deadline that may still be live, if any."""
        return self._heap[0][0] if self._heap else None

    def _compact(self) -> None:
        # Deleted messages leave stale heap entries until their deadline; rebuild
        # when they outnumber live ones so memory follows in-flight, not throughput.
        if len(self._heap) > 2 * len(self._deadline) + 1024:
            self._heap = [(d, i) for i, d in self._deadline.items()]
            heapq.heapify(self._heap)
