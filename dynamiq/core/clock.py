"""Time sources: the engine asks a ``Clock``; tests pass a ``FakeClock``."""

from __future__ import annotations

import asyncio
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

    async def sleep(self, seconds: float, wake: asyncio.Future[None]) -> None:
        """Wait ``seconds``, or less if ``wake`` completes first (``wake`` is the
        sleeper's own: the sleep may complete it)."""
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

    async def sleep(self, seconds: float, wake: asyncio.Future[None]) -> None:
        """Wait ``seconds``, or less if ``wake`` completes first.

        ``wake`` is the sleeper's own: the time running out completes it (one
        timer, where ``asyncio.wait_for`` adds a future and two callbacks).
        """
        timer = asyncio.get_running_loop().call_later(seconds, _complete, wake)
        try:
            await wake
        finally:
            timer.cancel()


def _complete(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


# Where a fake clock's wall time starts: 2026-01-01T00:00:00Z (message ids
# count microseconds from 2020, so a fake wall clock must be later than that).
FAKE_WALL_START_US = 1_767_225_600_000_000


class FakeClock:
    """A clock that moves only when told to; its wall time moves with it.

    Its ``sleep`` waits in real time, as the real clock's does, unless it
    ``jumps``: then a sleep nothing wakes at once moves the clock forward by
    its length instead, so a long poll runs in fake time and a test reads
    exactly when it would have woken.
    """

    def __init__(self, start: float = 1000.0, jumps: bool = False) -> None:
        self.t = start
        self._start = start
        self._jumps = jumps

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

    async def sleep(self, seconds: float, wake: asyncio.Future[None]) -> None:
        """Wait ``seconds`` (real or, when the clock jumps, fake), or less if
        ``wake`` completes first."""
        if not self._jumps:
            await MonotonicClock().sleep(seconds, wake)
            return
        await asyncio.sleep(0)  # whatever is ready to wake the sleeper runs first
        if not wake.done():
            self.advance(seconds)
