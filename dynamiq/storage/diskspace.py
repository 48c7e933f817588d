"""Free disk under the data directory, watched: publishes stop before the disk fills.

As RabbitMQ's ``disk_free_limit`` blocks publishers, a node whose data
directory's file system has less free space than the limit refuses
publishes (503 with Retry-After) and goes on serving consumers, whose
deletes make room.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

__all__ = ["FreeSpace"]

log = logging.getLogger("dynamiq.storage")

CHECK_SECONDS = 1.0


class FreeSpace:
    """Whether ``path``'s file system has at least ``limit`` bytes free (checked every
    ``interval`` seconds by ``watch_loop``)."""

    def __init__(self, path: Path, limit: int, interval: float = CHECK_SECONDS) -> None:
        self.path = path
        self.limit = limit
        self.interval = interval
        self.free: int | None = None  # bytes free at the last check; None before the first
        self.low = False

    async def check(self) -> None:
        """Look now: ``free`` and ``low`` say what was found."""
        usage = await asyncio.to_thread(shutil.disk_usage, self.path)
        self.free = usage.free
        low = usage.free < self.limit
        if low != self.low:
            log.warning(
                "free disk under %s: %d MiB, %s the limit of %d MiB: publishes %s",
                self.path,
                usage.free >> 20,
                "below" if low else "back above",
                self.limit >> 20,
                "refused" if low else "taken again",
            )
        self.low = low

    async def watch_loop(self) -> None:
        """Check every ``interval`` seconds until cancelled."""
        while True:
            try:
                await self.check()
            except OSError as exc:
                log.warning("cannot read free disk under %s: %s", self.path, exc)
            await asyncio.sleep(self.interval)
