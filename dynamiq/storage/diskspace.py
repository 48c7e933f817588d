"""Room on the embedded store's disk: publishes stop before the disk fills, and
consumers are served on a full one.

As RabbitMQ's ``disk_free_limit`` blocks publishers, a node whose data
directory has less room than the limit refuses publishes (503 ``DISK_LOW``
with Retry-After) and goes on serving consumers, whose deletes make room.
Room is the file system's free bytes plus the store's own free pages: LMDB
never shrinks its file, but reuses the pages deletes free, so a drained
queue makes room without a byte returned to the file system.

The limit is held twice. The store's writer asks ``has_room`` before each
commit that adds messages, for what that commit may need (so a flood
cannot outrun a sample); the watch (``watch_loop``) samples the room every
``CHECK_SECONDS`` for the node to refuse publishes before they reach the
store. And a reserve file (``limits.diskreserve`` bytes) is kept in the data
directory for the day something else fills the disk: a commit of deletes
that fails for want of space releases it and tries again, and the watch
makes it again once there is room.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["DISK_RETRY_SECONDS", "RESERVE_FILE", "FreeSpace"]

log = logging.getLogger("dynamiq.storage")

CHECK_SECONDS = 1.0
DISK_RETRY_SECONDS = 5  # what a publish refused for want of disk is told to wait
RESERVE_FILE = "reserve"


class FreeSpace:
    """The room for ``path``'s store: at least ``limit`` bytes must stay free.

    ``store_free`` (set by the store) says how many bytes its file holds
    free for reuse; ``reserve`` bytes are kept in a file of their own.
    """

    def __init__(
        self, path: Path, limit: int, reserve: int = 0, interval: float = CHECK_SECONDS
    ) -> None:
        self.path = path
        self.limit = limit
        self.reserve = reserve
        self.interval = interval
        self.store_free: Callable[[], int] = lambda: 0
        self.last_room: int | None = None  # room at the last check; None before the first
        self.low = False

    @property
    def reserve_file(self) -> Path:
        return self.path / RESERVE_FILE

    def disk_free(self) -> int:
        """Bytes free on the file system (blocking: a system call)."""
        usage = os.statvfs(self.path)
        return usage.f_bavail * usage.f_frsize

    def room(self) -> int:
        """Bytes a store may still fill: the disk's free bytes and the store's free pages."""
        return self.disk_free() + self.store_free()

    def has_room(self, need: int) -> bool:
        """Whether ``need`` more bytes leave at least ``limit`` free (blocking)."""
        free = self.disk_free()
        if free - need >= self.limit:
            return True
        return free + self.store_free() - need >= self.limit

    def release_reserve(self) -> bool:
        """Give the reserve's bytes back to the file system; whether there was one."""
        try:
            self.reserve_file.unlink()
        except FileNotFoundError:
            return False
        log.warning("the disk under %s is full: its reserve is released", self.path)
        return True

    def keep_reserve(self) -> None:
        """Make the reserve file again once the disk has room for it (blocking)."""
        if not self.reserve or self.reserve_file.exists():
            return
        if self.disk_free() < self.limit + self.reserve:
            return
        made = self.path / f"{RESERVE_FILE}.new"
        try:
            with made.open("wb") as out:
                os.posix_fallocate(out.fileno(), 0, self.reserve)
            made.replace(self.reserve_file)  # whole or not at all
        except OSError as exc:
            with contextlib.suppress(OSError):
                made.unlink()
            log.warning(
                "cannot keep a reserve of %d MiB under %s: %s", self.reserve >> 20, self.path, exc
            )

    def _sample(self) -> int:
        self.keep_reserve()
        return self.room()

    async def check(self) -> None:
        """Look now: ``last_room`` and ``low`` say what was found."""
        room = await asyncio.to_thread(self._sample)
        self.last_room = room
        low = room < self.limit
        if low != self.low:
            log.warning(
                "room for the store under %s: %d MiB, %s the limit of %d MiB: publishes %s",
                self.path,
                room >> 20,
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
