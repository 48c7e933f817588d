"""The embedded store's writes, as functions of a write transaction and plain data.

Every write the store makes is one of ``OPS``, called with the environment's
trees (``Trees``), the transaction and its arguments (bytes, ints, lists of
them: what a writer in another process can be sent). The writer thread and
the writer process apply the same functions, so either commits alike.
Keys arrive packed (``key_of``): a bucket's prefix, then the id.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import lmdb

from dynamiq.storage.base import held_claim

__all__ = [
    "OPS",
    "TOTAL",
    "Trees",
    "key_of",
    "open_env",
    "prefix_of",
    "stored_total",
    "unused_bytes",
]

KEY = struct.Struct(">Q")
COUNT = struct.Struct(">q")
DROP_CHUNK = 10_000
CLAIMS_SWEPT = 10_000  # claims looked at per housekeeping round, at most
# In ``counts``, beside each bucket's count: every bucket's objects together. No
# bucket's key: a bucket's starts with its name's length, and names are never empty.
TOTAL = b"\x00"

Row = tuple[bytes, bytes]  # a key, its value


class Trees(NamedTuple):
    """The environment's named databases."""

    messages: Any
    counts: Any
    meta: Any
    claims: Any


def open_env(path: Path, map_size: int) -> tuple[Any, Trees]:
    """Open the store's environment in ``path`` (made if missing) and its trees.

    Raises:
        lmdb.Error: it cannot be opened.
    """
    path.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(
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
    env.reader_check()
    names = (b"messages", b"counts", b"meta", b"claims")
    return env, Trees(*(env.open_db(name) for name in names))


def prefix_of(bucket: str) -> bytes:
    """A bucket's keys start with its name, after the name's length."""
    raw = bucket.encode()
    return bytes([len(raw)]) + raw


def key_of(prefix: bytes, key: int) -> bytes:
    return prefix + KEY.pack(key)


def stored_total(txn: Any, counts: Any) -> int:
    """How many objects every bucket holds together: their total as kept in ``counts``,
    or, in a store made before it was kept, their counts added up."""
    raw = txn.get(TOTAL, db=counts)
    if raw is not None:
        return int(COUNT.unpack(raw)[0])
    return sum(COUNT.unpack(value)[0] for value in txn.cursor(db=counts).iternext(False))


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


def insert(t: Trees, txn: Any, rows: list[Row], added: dict[bytes, int]) -> list[bool]:
    """Create objects, never overwriting (``added``: per bucket's prefix, its rows)."""
    put, db = txn.put, t.messages
    stored = [put(key, value, overwrite=False, db=db) for key, value in rows]
    if not all(stored):  # an id another process took: rare
        added = dict(added)
        for (key, _), ok in zip(rows, stored, strict=True):
            if not ok:
                added[key[: -KEY.size]] -= 1
    _add_counts(t, txn, added)
    return stored


def delete(t: Trees, txn: Any, prefix: bytes, keys: list[bytes]) -> list[bool]:
    existed = [txn.delete(key, db=t.messages) for key in keys]
    _add_count(t, txn, prefix, -sum(existed))
    return existed


def replace(t: Trees, txn: Any, rows: list[Row]) -> list[bool]:
    get, put, db = txn.get, txn.put, t.messages
    return [get(key, db=db) is not None and put(key, value, db=db) for key, value in rows]


def move(t: Trees, txn: Any, rows: list[tuple[bytes, bytes, bytes, bytes, bytes]]) -> list[Any]:
    """Per row (source prefix and key, target prefix and key, value): moved, source
    absent (False), target taken (None)."""
    db = t.messages
    out: list[bool | None] = []
    for src, sk, dst, dk, value in rows:
        if txn.get(src + sk, db=db) is None:
            out.append(False)
        elif not txn.put(dst + dk, value, overwrite=False, db=db):
            out.append(None)
        else:
            txn.delete(src + sk, db=db)
            _add_count(t, txn, src, -1)
            _add_count(t, txn, dst, 1)
            out.append(True)
    return out


def insert_claimed(
    t: Trees, txn: Any, rows: list[tuple[bytes, bytes, bytes, bytes, bytes]], now_ms: int
) -> list[bool | bytes]:
    """Per row (prefix, key, value, claim key, claim record): stored with its claim,
    the claim held already (its holder), or the key taken (False)."""
    out: list[bool | bytes] = []
    for prefix, key, value, claim_key, record in rows:
        held = held_claim(txn.get(claim_key, db=t.claims), now_ms)
        if held is not None:
            out.append(held)
        elif not txn.put(prefix + key, value, overwrite=False, db=t.messages):
            out.append(False)
        else:
            txn.put(claim_key, record, db=t.claims)
            _add_count(t, txn, prefix, 1)
            out.append(True)
    return out


def drop_chunk(t: Trees, txn: Any, prefix: bytes) -> bool:
    """Delete up to ``DROP_CHUNK`` of a bucket's objects; whether none is left."""
    cursor = txn.cursor(db=t.messages)
    removed = 0
    if cursor.set_range(prefix):
        while removed < DROP_CHUNK and cursor.key().startswith(prefix):
            if not cursor.delete():
                break
            removed += 1
    if removed < DROP_CHUNK:
        raw = txn.get(prefix, db=t.counts)
        if raw is not None:
            txn.delete(prefix, db=t.counts)
            _bump(t, txn, TOTAL, -COUNT.unpack(raw)[0])
        return True
    _add_count(t, txn, prefix, -removed)
    return False


def meta_create(t: Trees, txn: Any, key: bytes, value: bytes) -> bool:
    return bool(txn.put(key, value, overwrite=False, db=t.meta))


def meta_put(t: Trees, txn: Any, rows: list[Row], gone: list[bytes]) -> None:
    for key, value in rows:
        txn.put(key, value, db=t.meta)
    for key in gone:
        txn.delete(key, db=t.meta)


def meta_delete(t: Trees, txn: Any, keys: list[bytes]) -> int:
    return sum(bool(txn.delete(k, db=t.meta)) for k in keys)


def sweep_claims(t: Trees, txn: Any, start: bytes, now_ms: int) -> bytes:
    """Delete the expired claims among the next ``CLAIMS_SWEPT`` from ``start``; return
    where the next sweep starts (empty: from the first)."""
    cursor = txn.cursor(db=t.claims)
    found = cursor.set_range(start)
    seen = 0
    while found and seen < CLAIMS_SWEPT:
        seen += 1
        if held_claim(cursor.value(), now_ms) is None:
            cursor.delete()  # moves to the next entry, if there is one
            found = bool(cursor.key())
        else:
            found = cursor.next()
    return bytes(cursor.key()) if found else b""


def _add_count(t: Trees, txn: Any, prefix: bytes, delta: int) -> None:
    if delta:
        _bump(t, txn, prefix, delta)
        _bump(t, txn, TOTAL, delta)


def _bump(t: Trees, txn: Any, key: bytes, delta: int) -> None:
    raw = txn.get(key, db=t.counts)
    txn.put(key, COUNT.pack((COUNT.unpack(raw)[0] if raw else 0) + delta), db=t.counts)


def _add_counts(t: Trees, txn: Any, deltas: dict[bytes, int]) -> None:
    """Add to many buckets' counts: in key order on one cursor (a fan-out's
    thousands of queues cost a third less than one lookup each)."""
    if len(deltas) <= 1:  # one queue's publish (none: every id taken)
        for prefix, delta in deltas.items():
            _add_count(t, txn, prefix, delta)
        return
    pack, unpack = COUNT.pack, COUNT.unpack
    with txn.cursor(db=t.counts) as cursor:
        for prefix in sorted(deltas):
            if delta := deltas[prefix]:
                raw = cursor.value() if cursor.set_key(prefix) else None
                cursor.put(prefix, pack((unpack(raw)[0] if raw else 0) + delta))
    _bump(t, txn, TOTAL, sum(deltas.values()))


# By name: what a writer in another process is asked for.
OPS: dict[str, Callable[..., Any]] = {
    op.__name__: op
    for op in (
        insert,
        delete,
        replace,
        move,
        insert_claimed,
        drop_chunk,
        meta_create,
        meta_put,
        meta_delete,
        sweep_claims,
    )
}
