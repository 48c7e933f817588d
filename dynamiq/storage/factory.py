"""The store a node's settings name: opened (with the room on its disk), described.

The one place that chooses between the backends; each is imported only
when chosen (its client library is an optional dependency).
"""

from __future__ import annotations

from pathlib import Path

from dynamiq.config import Settings
from dynamiq.storage.base import StorageBackend
from dynamiq.storage.diskspace import FreeSpace

__all__ = ["describe", "open_store"]


def open_store(settings: Settings) -> tuple[StorageBackend, FreeSpace | None]:
    """Open the configured store with the node's connection pool; with the room on its
    disk where the node keeps it (the embedded store; other stores keep their own)."""
    storage, pool = settings.storage, settings.core.backendconnectionpool
    if storage.backend == "riak":
        from dynamiq.storage.riak import RiakBackend

        return RiakBackend(settings.core.riak_nodes(), pool, timeout=storage.timeout), None
    if storage.backend == "redis":
        from dynamiq.storage.redis import RedisBackend

        return RedisBackend(storage.url, storage.waitreplicas, pool), None
    from dynamiq.storage.lmdb import LmdbBackend

    path = Path(storage.path).resolve()
    limits = settings.limits
    space = FreeSpace(path, limits.diskfreelimit, limits.diskreserve)
    return LmdbBackend(path, storage.mapsize, space, storage.writer), space


def describe(settings: Settings) -> str:
    """Say where the node's messages live (for the line a node prints when it serves)."""
    storage = settings.storage
    if storage.backend == "riak":
        return f"riak store at {settings.core.riaknodes}"
    if storage.backend == "redis":
        return f"redis store at {storage.url}"
    return f"lmdb data in {Path(storage.path).resolve()}"
