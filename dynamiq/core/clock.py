"""Time sources: the engine asks a ``Clock``; tests pass a ``FakeClock``."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "FakeClock", "MonotonicClock"]


class Clock(Protocol):
    """Monotonic seconds for leases and partition ages; wall milliseconds for records."""

    def now(self) -> float:
        """Return monotonic seconds."""
        ...

    def wall_ms(self) -> int:
        """Return milliseconds since the Unix epoch."""
        ...

    def wall_us(self) -> int:
        """Return microseconds since the Unix epoch (message ids and due times)."""
        ...


class MonotonicClock:
    """The real clock."""

    def now(self) -> float:
        """Return monotonic seconds."""
        return time.monotonic()

    def wall_ms(self) -> int:
        """Return milliseconds since the Unix epoch."""
        return time.time_ns() // 1_000_000

    def wall_us(self) -> int:
        """Return microseconds since the Unix epoch."""
        return time.time_ns() // 1000


# Where a fake clock's wall time starts: 2026-01-01T00:00:00Z (message ids
# count microseconds from 2020, so a fake wall clock must be later than that).
FAKE_WALL_START_US = 1_767_225_600_000_000


class FakeClock:
    """A clock that moves only when told to; its wall time moves with it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start
        self._start = start

    def now(self) -> float:
        """Return the fake monotonic time."""
        return self.t

    def wall_ms(self) -> int:
        """Return the fake time as epoch milliseconds."""
        return self.wall_us() // 1000

    def wall_us(self) -> int:
        """Return the fake time as epoch microseconds."""
        return FAKE_WALL_START_US + round((self.t - self._start) * 1e6)

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.t += seconds
