"""Publishes, receives and deletes per queue over a sliding window, counted in
one-second buckets for every queue of the node at once (pure).

Kept apart from the queues' in-memory state: a publish to ten thousand queues
(a wide fan-out) counts one entry per queue in this second's bucket, and makes
no state for queues nobody receives from here.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable
from enum import IntEnum

__all__ = ["RATE_WINDOW_SECONDS", "Activity", "Event"]

RATE_WINDOW_SECONDS = 10


class Event(IntEnum):
    PUBLISHED = 0
    RECEIVED = 1
    DELETED = 2


class Activity:
    """Counts each queue's events (by bucket) and tells their rates over the last
    ``window`` whole seconds."""

    def __init__(self, window: int = RATE_WINDOW_SECONDS) -> None:
        self._window = window
        # (second, per event: per bucket its count), oldest first
        self._seconds: deque[tuple[int, tuple[Counter[str], ...]]] = deque()

    def add(self, event: Event, uid: str, count: int, now: float) -> None:
        """Count ``count`` events of the queue in bucket ``uid`` at time ``now``."""
        if count:
            self._second(now)[event][uid] += count

    def add_each(self, event: Event, counts: Iterable[tuple[str, int]], now: float) -> None:
        """Count events of several queues at once: ``(bucket, count)`` pairs."""
        counted = self._second(now)[event]
        get = counted.get  # no ``Counter.__missing__`` call per queue new this second
        for uid, count in counts:
            counted[uid] = get(uid, 0) + count

    def rates(self, uid: str, now: float) -> tuple[float, float, float]:
        """Return the queue's publishes, receives and deletes a second over the last
        ``window`` seconds before ``now`` (the current second, not complete, left out)."""
        return self._summed(now, lambda counted: counted.get(uid, 0))

    def totals(self, now: float) -> tuple[float, float, float]:
        """Return every queue's publishes, receives and deletes a second together, as
        ``rates`` does one queue's."""
        return self._summed(now, lambda counted: sum(counted.values()))

    def _summed(
        self, now: float, count: Callable[[Counter[str]], int]
    ) -> tuple[float, float, float]:
        second = int(now)
        self._trim(second)
        totals = [0, 0, 0]
        for at, counted in self._seconds:
            if at < second:
                for event in Event:
                    totals[event] += count(counted[event])
        published, received, deleted = totals
        return published / self._window, received / self._window, deleted / self._window

    def recent(self, now: float) -> Counter[str]:
        """Return per bucket its events of every kind over the window, the current
        second's so far included: how busy each queue is on this node."""
        self._trim(int(now))
        out: Counter[str] = Counter()
        for _, counted in self._seconds:
            for per_uid in counted:
                out.update(per_uid)
        return out

    def _second(self, now: float) -> tuple[Counter[str], ...]:
        second = int(now)
        if not self._seconds or self._seconds[-1][0] != second:
            self._seconds.append((second, (Counter(), Counter(), Counter())))
            self._trim(second)
        return self._seconds[-1][1]

    def _trim(self, second: int) -> None:
        while self._seconds and self._seconds[0][0] < second - self._window:
            self._seconds.popleft()
