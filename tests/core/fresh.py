"""A fresh LMDB store per example, for property tests (hypothesis runs many examples in
one test, so a pytest fixture would be shared between them); a queue engine on a store."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from hypothesis import strategies as st

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import Clock
from dynamiq.core.queues import QueueService
from dynamiq.models import QueueSettings
from dynamiq.storage.lmdb import LmdbBackend

Step = tuple[str, int]  # an operation of a script, and the number it is made with


def scripts(max_size: int, **steps: tuple[int, int]) -> st.SearchStrategy[list[Step]]:
    """Scripts of up to ``max_size`` operations: each one of ``steps``, by name, with a
    number drawn from the range given for it."""
    drawn = (st.tuples(st.just(name), st.integers(*between)) for name, between in steps.items())
    return st.lists(st.one_of(*drawn), max_size=max_size)


def on_fresh_store(main: Callable[[LmdbBackend], Awaitable[None]]) -> None:
    """Run ``main`` on a new store in a temporary directory, then close and remove it."""

    async def run() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            store = LmdbBackend(Path(tmp), map_size=1 << 26)
            try:
                await main(store)
            finally:
                await store.close()

    asyncio.run(run())


async def one_queue(
    store: LmdbBackend, clock: Clock, settings: QueueSettings | None = None
) -> QueueService:
    """Create the queue ``q`` on ``store``; return an engine serving it."""
    catalog = Catalog(store)
    await catalog.create_queue("q", settings or QueueSettings())
    return QueueService(store, catalog, clock)


async def restarted(store: LmdbBackend, clock: Clock) -> QueueService:
    """A new engine on the same store: the node restarted, or another took over."""
    catalog = Catalog(store)
    await catalog.reload()
    return QueueService(store, catalog, clock)


async def two_engines(store: LmdbBackend, clock: Clock) -> tuple[QueueService, QueueService]:
    """Create the queue ``q`` on ``store``; return two engines serving it (two nodes)."""
    catalog = Catalog(store)
    await catalog.create_queue("q")
    return QueueService(store, catalog, clock), QueueService(store, catalog, clock)
