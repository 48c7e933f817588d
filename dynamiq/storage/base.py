"""The storage port: a small, batch-oriented, Riak-style key-value protocol.

Messages live in buckets (one per queue incarnation) under integer keys in
``[0, 2^63-1]``; keys double as the secondary index that range scans walk in
order. Configuration lives in a flat namespace of ``meta`` keys whose writes
are idempotent (set-like), plus one conditional create for names.

Every method may raise ``BackendUnavailable`` (the store cannot serve now) and
nothing else from the driver: adapters wrap their engine's errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from dynamiq.keyspace import KeyRange

__all__ = ["StorageBackend"]


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
        """Return how many objects the bucket holds."""
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

    async def meta_put(self, entries: dict[str, bytes]) -> None:
        """Store configuration values, overwriting."""
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
