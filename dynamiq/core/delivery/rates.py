"""Messages per second over a sliding window, counted in one-second buckets (pure)."""

from __future__ import annotations

from collections import deque

__all__ = ["RATE_WINDOW_SECONDS", "RateCounter"]

RATE_WINDOW_SECONDS = 10


class RateCounter:
    """Counts events and tells their rate over the last ``window`` whole seconds."""

    def __init__(self, window: int = RATE_WINDOW_SECONDS) -> None:
        self._window = window
        self._buckets: deque[list[int]] = deque()  # [second, count], oldest first

    def add(self, count: int, now: float) -> None:
        """Count ``count`` events at time ``now`` (seconds)."""
        second = int(now)
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1][1] += count
        else:
            self._buckets.append([second, count])
        self._trim(second)

    def rate(self, now: float) -> float:
        """Return events per second over the last ``window`` seconds before ``now``."""
        second = int(now)
        self._trim(second)
        return sum(c for s, c in self._buckets if s < second) / self._window

    def recent(self, now: float) -> int:
        """Return how many events came over the last ``window`` seconds, this one's so far
        included."""
        self._trim(int(now))
        return sum(c for _, c in self._buckets)

    def _trim(self, second: int) -> None:
        while self._buckets and self._buckets[0][0] < second - self._window:
            self._buckets.popleft()
