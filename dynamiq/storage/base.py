"""The storage port: a small, batch-oriented, Riak-style key-value protocol.

Messages live in buckets (one per queue incarnation) under integer keys in
``[0, 2^63-1]``; keys double as the secondary index that range scans walk in
order. Configuration lives in a flat namespace of ``meta`` keys whose writes
are idempotent (set-like), plus one conditional create for names. Claims
(deduplication records) live in a namespace of their own and expire.

Every method may raise ``BackendUnavailable`` (the store cannot serve now) and
nothing else from the driver: adapters wrap their engine's errors.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, Protocol

from dynamiq.keyspace import KeyRange

__all__ = [
    "Census",
    "Claimed",
    "Span",
    "StorageBackend",
    "census_by_scans",
    "claim_record",
    "claim_value",
    "held_claim",
    "insert_claimed_in_steps",
    "move_in_steps",
]

# One claimed insert: (bucket, key, value, claim key, claim value, claim expiry in
# epoch milliseconds, the claim's home stripe: the top 8 bits of its objects' keys).
Claimed = tuple[str, int, bytes, str, bytes, int, int]
# A key range cut in two: ``(lo, mid, hi)``, the keys ``[lo, mid]`` and ``(mid, hi]``.
Span = tuple[int, int, int]
_EXPIRY_DIGITS = 13  # epoch milliseconds, zero-padded: good until the year 2286


class StorageBackend(Protocol):
    """What the queue engine needs from a store."""

    async def insert(self, items: Sequence[tuple[str, int, bytes]]) -> list[bool]:
        """Create ``(bucket, key, value)`` objects durably, never overwriting.

        Returns:
            One flag per item: True if stored, False if the key already existed
            (that item is not written; the others are).
        """
        ...

    async def get(self, bucket: str, keys: Sequence[int]) -> list[bytes | None]:
        """Return the value of each key, None where absent."""
        ...

    async def delete(self, bucket: str, keys: Sequence[int]) -> list[bool]:
        """Delete keys durably; return per key whether it existed."""
        ...

    async def replace(self, bucket: str, items: Sequence[tuple[int, bytes]]) -> list[bool]:
        """Overwrite the values of existing keys durably; an absent key is not created.

        Returns:
            One flag per ``(key, value)`` item: whether the key existed (and so
            now holds the new value).
        """
        ...

    async def move(self, items: Sequence[tuple[str, int, str, int, bytes]]) -> list[bool | None]:
        """Move objects to new keys, possibly in another bucket, durably.

        Each item is ``(from_bucket, from_key, to_bucket, to_key, value)``: the
        target is created with ``value`` (never overwriting) and the source
        deleted. Atomic per item where the store allows it (one commit, one
        script); elsewhere the target is created first, then the source
        deleted, so a failure between leaves the message in both places
        (at-least-once), never in neither.

        Returns:
            Per item: True when moved; False when the source was absent
            (nothing written); None when the target key was taken (nothing
            changed: draw another key).
        """
        ...

    async def insert_claimed(self, items: Sequence[Claimed], now_ms: int) -> list[bool | bytes]:
        """Insert objects, each only if its claim can be recorded, durably.

        Each item is ``(bucket, key, value, claim key, claim value, expires_ms,
        home)``. A claim is live until its expiry (epoch milliseconds) is at
        most ``now_ms``, and holds its claim key against every other claim;
        the store forgets expired claims in its own time. Every item of one
        claim key names the same ``home``: the top 8 bits (one stripe of the
        queue engine) its objects' keys usually have, so a store may keep a
        claim beside them; an object whose key is in another stripe claims
        across stripes.

        Atomic per item where the store allows it (one commit, one script);
        elsewhere (or across stripes, for a store that keeps claims beside
        their objects) the object is inserted first, then claimed, and
        deleted again when the claim was held: a failure between leaves it
        stored without its claim (a retry may store it twice), never claimed
        without being stored.

        Returns:
            Per item: True when inserted and claimed; False when the object's
            key was taken (nothing changed: draw another key); else the value
            of the live claim that holds the claim key (nothing stored).
        """
        ...

    async def scan(
        self, bucket: str, ranges: Sequence[KeyRange], limit: int | Sequence[int]
    ) -> list[list[int]]:
        """Return, per inclusive range, its first keys in ascending order.

        Args:
            bucket: the bucket to scan.
            ranges: ``(lo, hi)`` inclusive key ranges.
            limit: how many keys to return at most, for all ranges or per range.
        """
        ...

    async def count(self, bucket: str) -> int:
        """Return how many objects of the bucket a scan can reach."""
        ...

    async def total(self) -> int | None:
        """Return how many objects every bucket holds together, in a few reads; None
        when the store keeps no such count (it would take a read of every bucket)."""
        ...

    async def census(self, bucket: str, spans: Sequence[Span], cap: int) -> Census:
        """Return the bucket's count and, per span ``(lo, mid, hi)``, its first key in
        ``[lo, mid]`` and how many keys lie in ``(mid, hi]`` (up to ``cap``): what
        a queue holds due and not due yet, stripe by stripe (``census_by_scans``)."""
        ...

    async def drop(self, bucket: str) -> None:
        """Delete every object of a bucket (may take a while; durable when it returns)."""
        ...

    async def meta_get(self, key: str) -> bytes | None:
        """Return a configuration value, None if absent."""
        ...

    async def meta_scan(self, prefix: str) -> dict[str, bytes]:
        """Return every configuration entry whose key starts with ``prefix``."""
        ...

    async def meta_create(self, key: str, value: bytes) -> bool:
        """Store a configuration value only if the key is absent; return whether it was."""
        ...

    async def meta_put(self, entries: dict[str, bytes], delete: Sequence[str] = ()) -> None:
        """Store configuration values, overwriting; then delete the keys ``delete``:
        one write where the store allows, else the values first."""
        ...

    async def meta_delete(self, keys: Sequence[str]) -> int:
        """Delete configuration keys; return how many existed."""
        ...

    def commit_stats(self) -> tuple[int, float]:
        """Return (commits, seconds spent committing) since the store was opened."""
        ...

    async def maintain(self) -> None:
        """Do periodic housekeeping; called every configuration reload round."""
        ...

    async def close(self) -> None:
        """Finish pending writes and release the store; idempotent."""
        ...


async def move_in_steps(
    store: StorageBackend, items: Sequence[tuple[str, int, str, int, bytes]]
) -> list[bool | None]:
    """``StorageBackend.move`` for a store that cannot make it one write: read which
    sources exist, create their targets, then delete the sources moved."""
    out: list[bool | None] = [None] * len(items)
    for bucket, idx in _by_bucket(items, range(len(items))).items():
        for i, value in zip(idx, await store.get(bucket, [items[i][1] for i in idx]), strict=True):
            if value is None:
                out[i] = False
    todo = [i for i, moved in enumerate(out) if moved is None]
    created = await store.insert([items[i][2:] for i in todo])
    done = [i for i, ok in zip(todo, created, strict=True) if ok]
    for bucket, idx in _by_bucket(items, done).items():
        await store.delete(bucket, [items[i][1] for i in idx])
    for i in done:
        out[i] = True
    return out


async def insert_claimed_in_steps(
    store: StorageBackend,
    claim: Callable[[Sequence[Claimed], int], Awaitable[list[bytes | None]]],
    items: Sequence[Claimed],
    now_ms: int,
) -> list[bool | bytes]:
    """``StorageBackend.insert_claimed`` for a store that cannot make it one write:
    insert, claim what was inserted, delete what lost its claim.

    ``claim`` records the claims of items unless a live one holds their key,
    and answers per item None (recorded) or the value of the claim that
    holds it.
    """
    out: list[bool | bytes] = [False] * len(items)
    stored = await store.insert([item[:3] for item in items])
    todo = [i for i, ok in enumerate(stored) if ok]
    held = await claim([items[i] for i in todo], now_ms)
    lost = [i for i, value in zip(todo, held, strict=True) if value is not None]
    for bucket, idx in _by_bucket(items, lost).items():
        await store.delete(bucket, [items[i][1] for i in idx])
    for i, value in zip(todo, held, strict=True):
        out[i] = True if value is None else value
    return out


class Census(NamedTuple):
    """A bucket's count (``objects``); per span, its first key up to the cut (None: none) and how
    many keys lie after it (up to a cap)."""

    objects: int
    firsts: list[int | None]
    after: list[int]


async def census_by_scans(
    store: StorageBackend, bucket: str, spans: Sequence[Span], cap: int
) -> Census:
    """``StorageBackend.census`` as a count and, unless the bucket is empty (an idle
    queue's usually is), two scans."""
    count = await store.count(bucket)
    if not count:
        return Census(0, [None] * len(spans), [0] * len(spans))
    heads, later = await asyncio.gather(
        store.scan(bucket, [(lo, mid) for lo, mid, _ in spans], 1),
        store.scan(bucket, [(mid + 1, hi) for _, mid, hi in spans], cap),
    )
    return Census(count, [keys[0] if keys else None for keys in heads], list(map(len, later)))


def claim_record(value: bytes, expires_ms: int) -> bytes:
    """Return what a store keeps for a claim: its expiry, then its value."""
    return b"%013d" % expires_ms + value


def held_claim(record: bytes | None, now_ms: int) -> bytes | None:
    """Return the value of a stored claim while it is live, else None."""
    if record is None or int(record[:_EXPIRY_DIGITS]) <= now_ms:
        return None
    return claim_value(record)


def claim_value(record: bytes) -> bytes:
    """Return the value of a stored claim."""
    return record[_EXPIRY_DIGITS:]


def _by_bucket(items: Sequence[Sequence[Any]], indices: Sequence[int]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = defaultdict(list)
    for i in indices:
        groups[items[i][0]].append(i)
    return groups
