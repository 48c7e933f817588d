"""The embedded store on LMDB: no server to run, fsync before every acknowledgement.

Reads run on the caller's thread in short read transactions (microseconds,
memory-mapped). Writes go to one writer thread, which takes every write that is
waiting, applies them in one transaction and commits once: concurrent requests
share one fsync (group commit) and the event loop never waits on the disk.
Several processes may open one directory; LMDB serialises their writers.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from dynamiq.errors import BackendUnavailable
from dynamiq.keyspace import KeyRange
from dynamiq.storage.base import (
    Census,
    Claimed,
    Span,
    census_by_scans,
    claim_record,
    held_claim,
)
from dynamiq.storage.diskspace import FreeSpace
from dynamiq.storage.lmdb_writer import Gate, GroupWriter, need

__all__ = ["LmdbBackend", "stored_total", "unused_bytes"]

log = logging.getLogger("dynamiq.storage")

T = TypeVar("T")
_KEY = struct.Struct(">Q")
_COUNT = struct.Struct(">q")
_MADV_DONTNEED = 4
DROP_CHUNK = 10_000
CLAIMS_SWEPT = 10_000  # claims looked at per housekeeping round, at most
META_CHUNK = 5_000  # configuration entries a scan reads between turns of the event loop
# In ``counts``, beside each bucket's count: every bucket's objects together. No
# bucket's key: a bucket's starts with its name's length, and names are never empty.
_TOTAL = b"\x00"
_BUCKET, _VALUE = itemgetter(0), itemgetter(1)  # of an item, of a row


def _prefix(bucket: str) -> bytes:
    raw = bucket.encode()
    return bytes([len(raw)]) + raw


class LmdbBackend:
    """``StorageBackend`` on an LMDB environment in ``path``."""

    def __init__(
        self, path: str | Path, map_size: int = 64 << 30, space: FreeSpace | None = None
    ) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        try:
            self._env = lmdb.open(
                str(path),
                map_size=map_size,
                max_dbs=8,
                max_readers=512,
                subdir=True,
                sync=True,
                metasync=True,
                readahead=False,
                lock=True,
            )
            self._env.reader_check()
            self._messages = self._env.open_db(b"messages")
            self._counts = self._env.open_db(b"counts")
            self._meta = self._env.open_db(b"meta")
            self._claims = self._env.open_db(b"claims")
            self._count_total()
        except lmdb.Error as exc:
            raise BackendUnavailable(f"cannot open LMDB store at {path}: {exc}") from exc
        self.path = Path(path)
        self.space = space
        if space is not None:
            space.store_free = self.free_bytes
        self._gate = Gate()
        self._writer = GroupWriter(self._env, self._gate, space)
        self._closed = False
        self._swept_to = b""  # where the next sweep of expired claims starts

    # -- messages ------------------------------------------------------------

    async def insert(self, items: Sequence[tuple[str, int, bytes]]) -> list[bool]:
        """Create objects durably, never overwriting; per item, whether it was stored."""
        buckets = Counter(map(_BUCKET, items))
        prefixes = {b: _prefix(b) for b in buckets}
        pack = _KEY.pack
        rows = [(prefixes[b] + pack(k), v) for b, k, v in items]

        def apply(txn: Any) -> list[bool]:
            put, db = txn.put, self._messages
            stored = [put(key, value, overwrite=False, db=db) for key, value in rows]
            added = buckets
            if not all(stored):  # an id another process took: rare
                added = Counter(b for (b, _, _), ok in zip(items, stored, strict=True) if ok)
            self._add_counts(txn, {prefixes[b]: n for b, n in added.items()})
            return stored

        return await self._write(apply, need(sum(map(len, map(_VALUE, rows))), len(rows)))

    async def get(self, bucket: str, keys: Sequence[int]) -> list[bytes | None]:
        """Return the value of each key, None where absent."""
        prefix = _prefix(bucket)

        def read(txn: Any) -> list[bytes | None]:
            get, pack, db = txn.get, _KEY.pack, self._messages
            return [get(prefix + pack(k), db=db) for k in keys]

        return self._read(read)

    async def delete(self, bucket: str, keys: Sequence[int]) -> list[bool]:
        """Delete keys durably; per key, whether it existed."""
        prefix = _prefix(bucket)
        raw = [prefix + _KEY.pack(k) for k in keys]

        def apply(txn: Any) -> list[bool]:
            existed = [txn.delete(key, db=self._messages) for key in raw]
            self._add_count(txn, prefix, -sum(existed))
            return existed

        return await self._write(apply)

    async def replace(self, bucket: str, items: Sequence[tuple[int, bytes]]) -> list[bool]:
        """Overwrite existing keys durably; per item, whether the key existed."""
        prefix = _prefix(bucket)
        rows = [(prefix + _KEY.pack(k), v) for k, v in items]

        def apply(txn: Any) -> list[bool]:
            get, put, db = txn.get, txn.put, self._messages
            return [get(key, db=db) is not None and put(key, value, db=db) for key, value in rows]

        return await self._write(apply)

    async def move(self, items: Sequence[tuple[str, int, str, int, bytes]]) -> list[bool | None]:
        """Move objects to new keys in one commit: per item moved, source absent, target taken."""
        pack = _KEY.pack
        rows = [
            (_prefix(src), pack(sk), _prefix(dst), pack(dk), value)
            for src, sk, dst, dk, value in items
        ]

        def apply(txn: Any) -> list[bool | None]:
            db = self._messages
            out: list[bool | None] = []
            for src, sk, dst, dk, value in rows:
                if txn.get(src + sk, db=db) is None:
                    out.append(False)
                elif not txn.put(dst + dk, value, overwrite=False, db=db):
                    out.append(None)
                else:
                    txn.delete(src + sk, db=db)
                    self._add_count(txn, src, -1)
                    self._add_count(txn, dst, 1)
                    out.append(True)
            return out

        return await self._write(apply)

    async def insert_claimed(self, items: Sequence[Claimed], now_ms: int) -> list[bool | bytes]:
        """Insert objects with their claims, each object and claim in one commit."""
        pack = _KEY.pack
        rows = [
            (_prefix(b), pack(k), v, ck.encode(), claim_record(cv, exp))
            for b, k, v, ck, cv, exp, _ in items
        ]

        def apply(txn: Any) -> list[bool | bytes]:
            out: list[bool | bytes] = []
            for prefix, key, value, claim_key, record in rows:
                held = held_claim(txn.get(claim_key, db=self._claims), now_ms)
                if held is not None:
                    out.append(held)
                elif not txn.put(prefix + key, value, overwrite=False, db=self._messages):
                    out.append(False)
                else:
                    txn.put(claim_key, record, db=self._claims)
                    self._add_count(txn, prefix, 1)
                    out.append(True)
            return out

        return await self._write(apply, need(sum(len(r[2]) + len(r[4]) for r in rows), len(rows)))

    async def scan(
        self, bucket: str, ranges: Sequence[KeyRange], limit: int | Sequence[int]
    ) -> list[list[int]]:
        """Return, per inclusive range, its first keys in ascending order."""
        prefix = _prefix(bucket)
        limits = [limit] * len(ranges) if isinstance(limit, int) else list(limit)
        plen = len(prefix)

        def read(txn: Any) -> list[list[int]]:
            out: list[list[int]] = []
            cursor = txn.cursor(db=self._messages)
            unpack = _KEY.unpack_from
            for (lo, hi), n in zip(ranges, limits, strict=True):
                keys: list[int] = []
                end = prefix + _KEY.pack(hi)
                if n > 0 and cursor.set_range(prefix + _KEY.pack(lo)):
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
        prefix = _prefix(bucket)

        def read(txn: Any) -> int:
            raw = txn.get(prefix, db=self._counts)
            return _COUNT.unpack(raw)[0] if raw else 0

        return self._read(read)

    async def total(self) -> int | None:
        """Return how many objects every bucket holds together (kept beside their counts)."""

        def read(txn: Any) -> int:
            raw = txn.get(_TOTAL, db=self._counts)
            return _COUNT.unpack(raw)[0] if raw else 0

        return self._read(read)

    async def census(self, bucket: str, spans: Sequence[Span], cap: int) -> Census:
        """The bucket's count, and per span its first key and the keys after its cut."""
        return await census_by_scans(self, bucket, spans, cap)

    async def drop(self, bucket: str) -> None:
        """Delete every object of a bucket, a chunk per commit."""
        prefix = _prefix(bucket)

        def apply(txn: Any) -> bool:
            cursor = txn.cursor(db=self._messages)
            removed = 0
            if cursor.set_range(prefix):
                while removed < DROP_CHUNK and cursor.key().startswith(prefix):
                    if not cursor.delete():
                        break
                    removed += 1
            if removed < DROP_CHUNK:
                raw = txn.get(prefix, db=self._counts)
                if raw is not None:
                    txn.delete(prefix, db=self._counts)
                    self._bump(txn, _TOTAL, -_COUNT.unpack(raw)[0])
                return True
            self._add_count(txn, prefix, -removed)
            return False

        while not await self._write(apply):
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
        raw = key.encode()
        return await self._write(lambda txn: txn.put(raw, value, overwrite=False, db=self._meta))

    async def meta_put(self, entries: dict[str, bytes], delete: Sequence[str] = ()) -> None:
        """Store configuration values, overwriting, and delete ``delete``, in one commit."""
        rows = [(k.encode(), v) for k, v in entries.items()]
        gone = [k.encode() for k in delete]

        def apply(txn: Any) -> None:
            for key, value in rows:
                txn.put(key, value, db=self._meta)
            for key in gone:
                txn.delete(key, db=self._meta)

        await self._write(apply)

    async def meta_delete(self, keys: Sequence[str]) -> int:
        """Delete configuration keys; return how many existed."""
        rows = [k.encode() for k in keys]
        return await self._write(lambda txn: sum(txn.delete(k, db=self._meta) for k in rows))

    @property
    def commits(self) -> int:
        """Commits since the store opened."""
        return self._writer.commits

    def commit_stats(self) -> tuple[int, float]:
        """Return (commits, seconds spent applying and committing) since the store opened."""
        return self._writer.commits, self._writer.commit_seconds

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
        await self._write(self._sweep_claims)

    def _sweep_claims(self, txn: Any) -> None:
        """Delete the expired claims among the next ``CLAIMS_SWEPT``, then move on."""
        now_ms = int(time.time() * 1000)
        cursor = txn.cursor(db=self._claims)
        found = cursor.set_range(self._swept_to)
        seen = 0
        while found and seen < CLAIMS_SWEPT:
            seen += 1
            if held_claim(cursor.value(), now_ms) is None:
                cursor.delete()  # moves to the next entry, if there is one
                found = bool(cursor.key())
            else:
                found = cursor.next()
        self._swept_to = cursor.key() if found else b""

    def _maintain(self) -> None:
        self._env.reader_check()
        _drop_mapped_pages(self.path / "data.mdb")

    async def close(self) -> None:
        """Commit what is queued, stop the writer and close the environment."""
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._writer.stop)
        self._env.close()

    # -- machinery -----------------------------------------------------------

    def _count_total(self) -> None:
        """Count every bucket's objects together, once, in a store made before the total
        was kept (each commit keeps it from then on)."""
        with self._env.begin(write=True) as txn:
            if txn.get(_TOTAL, db=self._counts) is None:
                txn.put(_TOTAL, _COUNT.pack(stored_total(txn, self._counts)), db=self._counts)

    def _add_count(self, txn: Any, prefix: bytes, delta: int) -> None:
        if delta:
            self._bump(txn, prefix, delta)
            self._bump(txn, _TOTAL, delta)

    def _bump(self, txn: Any, key: bytes, delta: int) -> None:
        raw = txn.get(key, db=self._counts)
        txn.put(key, _COUNT.pack((_COUNT.unpack(raw)[0] if raw else 0) + delta), db=self._counts)

    def _add_counts(self, txn: Any, deltas: dict[bytes, int]) -> None:
        """Add to many buckets' counts: in key order on one cursor (a fan-out's
        thousands of queues cost a third less than one lookup each)."""
        if len(deltas) <= 1:  # one queue's publish (none: every id taken)
            for prefix, delta in deltas.items():
                self._add_count(txn, prefix, delta)
            return
        pack, unpack = _COUNT.pack, _COUNT.unpack
        with txn.cursor(db=self._counts) as cursor:
            for prefix in sorted(deltas):
                if delta := deltas[prefix]:
                    raw = cursor.value() if cursor.set_key(prefix) else None
                    cursor.put(prefix, pack((unpack(raw)[0] if raw else 0) + delta))
        self._bump(txn, _TOTAL, sum(deltas.values()))

    def _read(self, fn: Callable[[Any], T]) -> T:
        if self._closed:
            raise BackendUnavailable("the store is closed")
        for _ in range(3):
            try:
                with self._gate.shared(), self._env.begin(buffers=False) as txn:
                    return fn(txn)
            except lmdb.MapResizedError:
                self._writer.adopt_map_size()
            except lmdb.Error as exc:
                raise BackendUnavailable(f"LMDB read failed: {exc}") from exc
        raise BackendUnavailable("LMDB map kept resizing under this read")

    async def _write(self, apply: Callable[[Any], T], adds: int = 0) -> T:
        """Apply a write in the writer's next commit (``adds``: what it may need on disk,
        for a write that stores messages)."""
        if self._closed:
            raise BackendUnavailable("the store is closed")
        result: T = await self._writer.submit(apply, adds)
        return result


def stored_total(txn: Any, counts: Any) -> int:
    """How many objects every bucket holds together: their total as kept in ``counts``,
    or, in a store made before it was kept, their counts added up."""
    raw = txn.get(_TOTAL, db=counts)
    if raw is not None:
        return int(_COUNT.unpack(raw)[0])
    return sum(_COUNT.unpack(value)[0] for value in txn.cursor(db=counts).iternext(False))


def unused_bytes(env: Any, txn: Any, dbs: Iterable[Any]) -> int:
    """Bytes of the pages of ``env``'s file that no tree uses (the named ``dbs``' nor the
    main one's): free for reuse, as deletes leave them."""
    stat: dict[str, int] = env.stat()
    used = stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]
    for db in dbs:
        tree = txn.stat(db)
        used += tree["branch_pages"] + tree["leaf_pages"] + tree["overflow_pages"]
    pages: int = env.info()["last_pgno"] + 1 - 2  # two meta pages
    return max(0, pages - used) * stat["psize"]


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
