"""Room for request bodies: bytes held at once, at most a limit, first come first served.

A request that would go past the limit waits its turn; one that waits
longer than ``ADMIT_SECONDS`` is refused (``Overloaded``, a 503 with
Retry-After), so that memory stays bounded however many clients send.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib

from dynamiq.errors import Overloaded

__all__ = ["ADMIT_SECONDS", "Intake"]

ADMIT_SECONDS = 5.0  # how long a request waits for room for its body before a 503


class Intake:
    """Bytes of request bodies held at once, at most ``limit``; first come, first served."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def take(self, size: int, seconds: float = ADMIT_SECONDS) -> None:
        """Hold ``size`` bytes, waiting up to ``seconds`` for room.

        Raises:
            Overloaded: there was no room in time.
        """
        size = min(size, self.limit)
        if not self._waiting and self.held + size <= self.limit:
            self.held += size
            return
        granted = asyncio.get_running_loop().create_future()
        entry = (size, granted)
        self._waiting.append(entry)
        try:
            async with asyncio.timeout(seconds):
                await granted
        except BaseException as exc:
            if granted.done() and not granted.cancelled():
                self.give(size)  # room came just as the wait ended
            else:
                with contextlib.suppress(ValueError):
                    self._waiting.remove(entry)
                self._grant()
            if isinstance(exc, TimeoutError):
                raise Overloaded(
                    f"this node holds {self.held} bytes of requests "
                    "(limits.maxpendingbytes); try again"
                ) from None
            raise

    def give(self, size: int) -> None:
        """Let go of ``size`` bytes taken before."""
        self.held -= min(size, self.limit)
        self._grant()

    def _grant(self) -> None:
        while self._waiting:
            size, granted = self._waiting[0]
            if granted.done():  # its wait ended
                self._waiting.popleft()
                continue
            if self.held + size > self.limit:
                return
            self._waiting.popleft()
            self.held += size
            granted.set_result(None)
