"""The embedded store on LMDB: no server to run, fsync before every acknowledgement.

Reads run on the caller's thread in short read transactions (microseconds,
memory-mapped). Writes (``ops``, by name) go to one writer thread, which
takes every write that is waiting, applies them in one transaction and
commits once: concurrent requests share one fsync (group commit) and the
event loop never waits on the disk. Or, with ``writer="process"``, to the
directory's writer process (``server``), which does the same for every
process of the node. Several processes may open one directory; LMDB
serialises their writers.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from dynamiq.errors import BackendUnavailable
from dynamiq.keyspace import KeyRange
from dynamiq.storage.base import Census, Claimed, Span, census_by_scans, claim_record
from dynamiq.storage.diskspace import FreeSpace
from dynamiq.storage.lmdb.ops import (
    COUNT,
    KEY,
    OPS,
    TOTAL,
    key_of,
    open_env,
    prefix_of,
    stored_total,
    unused_bytes,
)
from dynamiq.storage.lmdb.remote import RemoteWriter
from dynamiq.storage.lmdb.writer import Gate, GroupWriter, need

__all__ = ["LmdbBackend", "stored_total", "unused_bytes"]

log = logging.getLogger("dynamiq.storage")

T = TypeVar("T")
_MADV_DONTNEED = 4
META_CHUNK = 5_000  # configuration entries a scan reads between turns of the event loop
_BUCKET, _VALUE = itemgetter(0), itemgetter(1)  # of an item, of a row


class LmdbBackend:
    """``StorageBackend`` on an LMDB environment in ``path``."""

    def __init__(
        self,
        path: str | Path,
        map_size: int = 64 << 30,
        space: FreeSpace | None = None,
        writer: str = "thread",
    ) -> None:
        self.path = Path(path)
        try:
            self._env, self._trees = open_env(self.path, map_size)
            self._messages, self._counts, self._meta, self._claims = self._trees
            self._count_total()
        except lmdb.Error as exc:
            raise BackendUnavailable(f"cannot open LMDB store at {path}: {exc}") from exc
        self.space = space
        if space is not None:
            space.store_free = self.free_bytes
        self._gate = Gate()
        self._writer: GroupWriter | None = None
        self._remote: RemoteWriter | None = None
        if writer == "process":
            self._remote = RemoteWriter(self.path, _writer_argv(map_size, space))
        else:
            self._writer = GroupWriter(self._env, self._gate, space)
        self._closed = False
        self._swept_to = b""  # where the next sweep of expired claims starts

    # -- messages ------------------------------------------------------------

    async def insert(self, items: Sequence[tuple[str, int, bytes]]) -> list[bool]:
        """Create objects durably, never overwriting; per item, whether it was stored."""
        buckets = Counter(map(_BUCKET, items))
        prefixes = {b: prefix_of(b) for b in buckets}
        pack = KEY.pack
        rows = [(prefixes[b] + pack(k), v) for b, k, v in items]
        added = {prefixes[b]: n for b, n in buckets.items()}
        adds = need(sum(map(len, map(_VALUE, rows))), len(rows))
        stored: list[bool] = await self._write("insert", rows, added, adds=adds)
        return stored

    async def get(self, bucket: str, keys: Sequence[int]) -> list[bytes | None]:
        """Return the value of each key, None where absent."""
        prefix = prefix_of(bucket)

        def read(txn: Any) -> list[bytes | None]:
            get, pack, db = txn.get, KEY.pack, self._messages
            return [get(prefix + pack(k), db=db) for k in keys]

        return self._read(read)

    async def delete(self, bucket: str, keys: Sequence[int]) -> list[bool]:
        """Delete keys durably; per key, whether it existed."""
        prefix = prefix_of(bucket)
        existed: list[bool] = await self._write("delete", prefix, [key_of(prefix, k) for k in keys])
        return existed

    async def replace(self, bucket: str, items: Sequence[tuple[int, bytes]]) -> list[bool]:
        """Overwrite existing keys durably; per item, whether the key existed."""
        prefix = prefix_of(bucket)
        existed: list[bool] = await self._write(
            "replace", [(key_of(prefix, k), v) for k, v in items]
        )
        return existed

    async def move(self, items: Sequence[tuple[str, int, str, int, bytes]]) -> list[bool | None]:
        """Move objects to new keys in one commit: per item moved, source absent, target taken."""
        pack = KEY.pack
        rows = [
            (prefix_of(src), pack(sk), prefix_of(dst), pack(dk), value)
            for src, sk, dst, dk, value in items
        ]
        moved: list[bool | None] = await self._write("move", rows)
        return moved

    async def insert_claimed(self, items: Sequence[Claimed], now_ms: int) -> list[bool | bytes]:
        """Insert objects with their claims, each object and claim in one commit."""
        pack = KEY.pack
        rows = [
            (prefix_of(b), pack(k), v, ck.encode(), claim_record(cv, exp))
            for b, k, v, ck, cv, exp, _ in items
        ]
        adds = need(sum(len(r[2]) + len(r[4]) for r in rows), len(rows))
        stored: list[bool | bytes] = await self._write("insert_claimed", rows, now_ms, adds=adds)
        return stored

    async def scan(
        self, bucket: str, ranges: Sequence[KeyRange], limit: int | Sequence[int]
    ) -> list[list[int]]:
        """Return, per inclusive range, its first keys in ascending order."""
        prefix = prefix_of(bucket)
        limits = [limit] * len(ranges) if isinstance(limit, int) else list(limit)
        plen = len(prefix)

        def read(txn: Any) -> list[list[int]]:
            out: list[list[int]] = []
            cursor = txn.cursor(db=self._messages)
            unpack = KEY.unpack_from
            for (lo, hi), n in zip(ranges, limits, strict=True):
                keys: list[int] = []
                end = prefix + KEY.pack(hi)
                if n > 0 and cursor.set_range(prefix + KEY.pack(lo)):
                    for key in cursor.iternext(keys=True, values=False):
                        if key > end:
                            break
                        keys.append(unpack(key, plen)[0])
                        if len(keys) >= n:
                            break
                out.append(keys)
            return out

        return self._read(read)

    async def count(self, bucket: str) -> int:
        """Return how many objects the bucket holds."""
        prefix = prefix_of(bucket)

        def read(txn: Any) -> int:
            raw = txn.get(prefix, db=self._counts)
            return COUNT.unpack(raw)[0] if raw else 0

        return self._read(read)

    async def total(self) -> int | None:
        """Return how many objects every bucket holds together (kept beside their counts)."""

        def read(txn: Any) -> int:
            raw = txn.get(TOTAL, db=self._counts)
            return COUNT.unpack(raw)[0] if raw else 0

        return self._read(read)

    async def census(self, bucket: str, spans: Sequence[Span], cap: int) -> Census:
        """The bucket's count, and per span its first key and the keys after its cut."""
        return await census_by_scans(self, bucket, spans, cap)

    async def drop(self, bucket: str) -> None:
        """Delete every object of a bucket, a chunk per commit."""
        prefix = prefix_of(bucket)
        while not await self._write("drop_chunk", prefix):
            pass

    # -- configuration -------------------------------------------------------

    async def meta_get(self, key: str) -> bytes | None:
        """Return a configuration value, None if absent."""
        raw = key.encode()

        def read(txn: Any) -> bytes | None:
            value: bytes | None = txn.get(raw, db=self._meta)
            return value

        return self._read(read)

    async def meta_scan(self, prefix: str) -> dict[str, bytes]:
        """Return every configuration entry whose key starts with ``prefix``: read
        ``META_CHUNK`` at a time, letting the event loop run between (a catalog of
        a million queues; each chunk a snapshot of its own)."""
        start = prefix.encode()
        out: dict[str, bytes] = {}

        def read(txn: Any, at: bytes) -> bytes | None:
            """Read a chunk from ``at`` on; return where the next starts (None: done)."""
            cursor = txn.cursor(db=self._meta)
            if not cursor.set_range(at):
                return None
            for n, (key, value) in enumerate(cursor):
                if not key.startswith(start):
                    return None
                if n == META_CHUNK:
                    return bytes(key)
                out[key.decode()] = value
            return None

        at: bytes | None = start
        while at is not None:
            at = self._read(functools.partial(read, at=at))
            if at is not None:
                await asyncio.sleep(0)
        return out

    async def meta_create(self, key: str, value: bytes) -> bool:
        """Store a configuration value only if the key is absent."""
        created: bool = await self._write("meta_create", key.encode(), value)
        return created

    async def meta_put(self, entries: dict[str, bytes], delete: Sequence[str] = ()) -> None:
        """Store configuration values, overwriting, and delete ``delete``, in one commit."""
        rows = [(k.encode(), v) for k, v in entries.items()]
        await self._write("meta_put", rows, [k.encode() for k in delete])

    async def meta_delete(self, keys: Sequence[str]) -> int:
        """Delete configuration keys; return how many existed."""
        existed: int = await self._write("meta_delete", [k.encode() for k in keys])
        return existed

    @property
    def commits(self) -> int:
        """Commits since the store opened (the writer process's: since it started)."""
        return self.commit_stats()[0]

    def commit_stats(self) -> tuple[int, float]:
        """Return (commits, seconds spent applying and committing) since the store opened."""
        writer = self._writer or self._remote
        assert writer is not None
        return writer.commits, writer.commit_seconds

    def free_bytes(self) -> int:
        """Bytes the store's file holds free for reuse: its pages that no tree uses
        (deletes free them; LMDB never gives them back to the file system)."""

        def read(txn: Any) -> int:
            return unused_bytes(
                self._env, txn, (self._messages, self._counts, self._meta, self._claims)
            )

        return self._read(read)

    async def maintain(self) -> None:
        """Clear reader slots of dead processes; unmap pages this process touched;
        forget a round's worth of expired claims.

        Every page read through the map stays counted in this process's RSS
        until the kernel needs the memory. Dropping the mappings (the pages
        stay in the page cache; the next read maps them again) keeps RSS at
        the working set instead of the data size.
        """
        if self._closed:
            return
        # Reading /proc/self/maps and madvise are system calls: off the event loop.
        await asyncio.to_thread(self._maintain)
        now_ms = int(time.time() * 1000)
        self._swept_to = await self._write("sweep_claims", self._swept_to, now_ms)

    def _maintain(self) -> None:
        self._env.reader_check()
        _drop_mapped_pages(self.path / "data.mdb")

    async def close(self) -> None:
        """Commit what is queued, stop the writer and close the environment."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            await asyncio.to_thread(self._writer.stop)
        if self._remote is not None:
            await self._remote.close()
        self._env.close()

    # -- machinery -----------------------------------------------------------

    def _count_total(self) -> None:
        """Count every bucket's objects together, once, in a store made before the total
        was kept (each commit keeps it from then on)."""
        with self._env.begin(write=True) as txn:
            if txn.get(TOTAL, db=self._counts) is None:
                txn.put(TOTAL, COUNT.pack(stored_total(txn, self._counts)), db=self._counts)

    def _read(self, fn: Callable[[Any], T]) -> T:
        if self._closed:
            raise BackendUnavailable("the store is closed")
        for _ in range(3):
            try:
                with self._gate.shared(), self._env.begin(buffers=False) as txn:
                    return fn(txn)
            except lmdb.MapResizedError:
                self._gate.adopt_map_size(self._env)
            except lmdb.Error as exc:
                raise BackendUnavailable(f"LMDB read failed: {exc}") from exc
        raise BackendUnavailable("LMDB map kept resizing under this read")

    async def _write(self, op: str, *args: Any, adds: int = 0) -> Any:
        """Apply ``ops.OPS[op]`` with ``args`` in the writer's next commit (``adds``:
        what it may need on disk, for a write that stores messages)."""
        if self._closed:
            raise BackendUnavailable("the store is closed")
        if self._remote is not None:
            return await self._remote.write(op, args, adds)
        assert self._writer is not None
        apply, trees = OPS[op], self._trees
        return await self._writer.submit(lambda txn: apply(trees, txn, *args), adds)


def _writer_argv(map_size: int, space: FreeSpace | None) -> list[str]:
    """What a writer process is started with, beside the store's path."""
    level = logging.getLevelName(log.getEffectiveLevel()).lower()
    argv = ["--map-size", str(map_size), "--log-level", level]
    if space is not None:
        argv += ["--limit", str(space.limit), "--reserve", str(space.reserve)]
    return argv


def _drop_mapped_pages(data_file: Path) -> None:
    """madvise(MADV_DONTNEED) this process's shared mappings of ``data_file`` (Linux)."""
    try:
        maps = Path("/proc/self/maps").read_text()
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return
    target = str(data_file.resolve())
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5] == target and fields[1].startswith("r"):
            start, end = (int(x, 16) for x in fields[0].split("-"))
            madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), _MADV_DONTNEED)
