"""The store a node's settings name: opened, described, and its disk watched.

The one place that chooses between the backends; each is imported only
when chosen (its client library is an optional dependency).
"""

from __future__ import annotations

from pathlib import Path

from dynamiq.config import Settings
from dynamiq.storage.base import StorageBackend
from dynamiq.storage.diskspace import FreeSpace

__all__ = ["describe", "disk_watch", "open_store"]


def open_store(settings: Settings) -> StorageBackend:
    """Open the configured store with the node's connection pool."""
    storage, pool = settings.storage, settings.core.backendconnectionpool
    if storage.backend == "riak":
        from dynamiq.storage.riak import RiakBackend

        return RiakBackend(settings.core.riak_nodes(), pool, timeout=storage.timeout)
    if storage.backend == "redis":
        from dynamiq.storage.redis import RedisBackend

        return RedisBackend(storage.url, storage.waitreplicas, pool)
    from dynamiq.storage.lmdb import LmdbBackend

    return LmdbBackend(Path(storage.path).resolve(), map_size=storage.mapsize)


def describe(settings: Settings) -> str:
    """Say where the node's messages live (for the line a node prints when it serves)."""
    storage = settings.storage
    if storage.backend == "riak":
        return f"riak store at {settings.core.riaknodes}"
    if storage.backend == "redis":
        return f"redis store at {storage.url}"
    return f"lmdb data in {Path(storage.path).resolve()}"


def disk_watch(settings: Settings) -> FreeSpace | None:
    """The embedded store's disk is the node's to watch; other stores watch their own."""
    if settings.storage.backend != "lmdb":
        return None
    return FreeSpace(Path(settings.storage.path), settings.limits.diskfreelimit)
