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


class MonotonicClock:
    """The real clock."""

    def now(self) -> float:
        """Return monotonic seconds."""
        return time.monotonic()

    def wall_ms(self) -> int:
        """Return milliseconds since the Unix epoch."""
        return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start

    def now(self) -> float:
        """Return the fake monotonic time."""
        return self.t

    def wall_ms(self) -> int:
        """Return the fake time as epoch milliseconds."""
        return int(self.t * 1000)

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.t += seconds
