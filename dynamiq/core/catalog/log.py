"""The catalog's log: every change's names, numbered, so that a process that missed an
announcement reads what changed instead of the whole catalog.

Each change, once stored, appends an entry ``log/<seq>`` (the queues, topics
and subscriptions it wrote, and when: ``CatalogNews.told``) by creating the
next free number: two writers never take the same one and no number is
skipped. Every process follows the log on each upkeep round, one read when
nothing changed, so keeping up costs the same with a million queues as with
one. Entries older than ``keep`` seconds go; a process that could not follow
for half that long (stopped, cut off from the store) reads the whole catalog
again instead. A change with no entry (its process died between the two
writes, or an older release made it during a rolling upgrade; that release
announces it, and the others read everything when told so) is found by the
next whole read: at start, and every ten minutes all the same.
"""

from __future__ import annotations

import asyncio
import json
import logging

from dynamiq.core.catalog.news import CatalogNews
from dynamiq.core.clock import Clock
from dynamiq.storage.base import StorageBackend

__all__ = ["CatalogLog"]

log = logging.getLogger("dynamiq.core")

PREFIX = "log/"
TRIM_BATCH = 1000  # entries deleted per round at most
WHOLE_EVERY_MS = 600_000  # the whole catalog is read again this often all the same


def _key(seq: int) -> str:
    return f"{PREFIX}{seq:016d}"


class CatalogLog:
    """This process's place in the catalog's log: what it applied, what it trimmed."""

    def __init__(self, store: StorageBackend, clock: Clock, keep: float = 60.0) -> None:
        self._store = store
        self._clock = clock
        self._keep_ms = int(keep * 1000)
        self._applied = 0  # the last entry this process has read (or read past)
        self._tail = 0  # the last entry known to exist
        self._trimmed = 0  # entries up to this one are gone, as far as this process knows
        self._followed_ms: int | None = None  # when the log was last followed
        self._whole_ms = 0  # when the whole catalog was last read
        self._waiting: list[tuple[CatalogNews, asyncio.Future[None]]] = []
        self._writing: asyncio.Task[None] | None = None

    async def seek_tail(self) -> None:
        """Start following from the log's end (a whole read of the catalog follows);
        ``trim`` goes through what is before it."""
        seqs = sorted(int(key[len(PREFIX) :]) for key in await self._store.meta_scan(PREFIX))
        last = seqs[-1] if seqs else 0
        self._applied = self._tail = max(self._tail, last)
        self._trimmed = max(self._trimmed, seqs[0] - 1 if seqs else last)
        self._followed_ms = self._whole_ms = self._clock.wall_ms()

    async def append(self, news: CatalogNews) -> None:
        """Number a change made here (after it was stored). The changes that come
        while an entry is being written share the next one (one write for many)."""
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((news, done))
        if self._writing is None or self._writing.done():
            self._writing = asyncio.create_task(self._write())
        await asyncio.shield(done)

    async def _write(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            queues, topics, partial, subscriptions = CatalogNews.merged(n for n, _ in batch).told()
            told = {"q": queues, "t": topics, "at": self._clock.wall_ms()}
            if subscriptions:
                told |= {"p": partial, "s": subscriptions}
            entry = json.dumps(told).encode()
            try:
                seq = self._tail + 1
                while not await self._store.meta_create(_key(seq), entry):
                    seq += 1  # taken by another process: read when this one follows
                self._tail = max(self._tail, seq)
            except BaseException as exc:
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            for _, done in batch:
                if not done.done():
                    done.set_result(None)

    async def follow(self) -> list[CatalogNews] | None:
        """The changes numbered since the last call, in order; None when this process
        fell too far behind to trust the log (read the whole catalog)."""
        now = self._clock.wall_ms()
        if self._followed_ms is None or now - self._followed_ms > self._keep_ms // 2:
            return None
        if now - self._whole_ms > WHOLE_EVERY_MS:
            return None  # a change with no entry (a writer died between, an older release)
        found: list[CatalogNews] = []
        while (raw := await self._store.meta_get(_key(self._applied + 1))) is not None:
            entry = json.loads(raw)
            found.append(
                CatalogNews.heard(entry["q"], entry["t"], entry.get("p", ()), entry.get("s", ()))
            )
            self._applied += 1
        self._tail = max(self._tail, self._applied)
        self._followed_ms = now
        return found

    async def trim(self) -> None:
        """Delete the entries older than ``keep`` (up to ``TRIM_BATCH`` a round)."""
        cutoff = self._clock.wall_ms() - self._keep_ms
        gone: list[str] = []
        seq = self._trimmed + 1
        while seq <= self._applied and len(gone) < TRIM_BATCH:
            raw = await self._store.meta_get(_key(seq))
            if raw is not None and self._at(raw) >= cutoff:
                break
            if raw is not None:
                gone.append(_key(seq))
            seq += 1
        if gone:
            await self._store.meta_delete(gone)
        self._trimmed = seq - 1

    @staticmethod
    def _at(raw: bytes) -> int:
        try:
            return int(json.loads(raw)["at"])
        except (ValueError, KeyError, TypeError):
            log.warning("a catalog log entry that cannot be read: dropped")
            return 0
