"""What the engine's parts stand on: the store, the catalog kept in it, the clock."""

from __future__ import annotations

from typing import NamedTuple

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import Clock
from dynamiq.storage.base import StorageBackend

__all__ = ["EngineContext"]


class EngineContext(NamedTuple):
    """The store, the catalog of queues and topics kept in it, and the clock that every
    part of one node's engine shares."""

    store: StorageBackend
    catalog: Catalog
    clock: Clock
