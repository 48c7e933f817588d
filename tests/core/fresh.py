"""A fresh LMDB store per example, for property tests (hypothesis runs many examples in
one test, so a pytest fixture would be shared between them)."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from dynamiq.storage.lmdb import LmdbBackend


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
