"""W1's shape in-process, without HTTP: the raw store (the ceiling) and the engine on it.

Each level runs three phases like W1: publish N messages of ``size`` bytes
in batches of ``batch`` with ``window`` messages in flight; drain them
(receive a batch, delete it) one batch at a time; and both at once on an
empty queue.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import MonotonicClock
from dynamiq.core.ids import IdGenerator
from dynamiq.core.queues import QueueService
from dynamiq.keyspace import ID_MAX
from dynamiq.storage.lmdb import LmdbBackend

__all__ = ["Rates", "measure_engine", "measure_store"]


@dataclass(frozen=True, slots=True)
class Rates:
    """Messages per second of each phase."""

    pub: float
    cons: float
    e2e: float


Publish = Callable[[int], Awaitable[None]]
Drain = Callable[[], Awaitable[int]]


async def _phases(publish: Publish, drain: Drain, n: int, batch: int, window: int) -> Rates:
    async def publish_all() -> None:
        slots = asyncio.Semaphore(max(1, window // batch))

        async def one(k: int) -> None:
            async with slots:
                await publish(k)

        await asyncio.gather(*(one(min(batch, n - i)) for i in range(0, n, batch)))

    async def drain_all() -> None:
        done = 0
        while done < n:
            got = await drain()
            if not got:
                await asyncio.sleep(0.0005)
            done += got

    t = time.perf_counter()
    await publish_all()
    pub = n / (time.perf_counter() - t)
    t = time.perf_counter()
    await drain_all()
    cons = n / (time.perf_counter() - t)
    t = time.perf_counter()
    await asyncio.gather(publish_all(), drain_all())
    e2e = n / (time.perf_counter() - t)
    return Rates(pub, cons, e2e)


async def measure_store(n: int, size: int, batch: int, window: int) -> Rates:
    """Batched insert / scan+get+delete straight on the LMDB store."""
    body = b"x" * size
    ids = IdGenerator()
    with tempfile.TemporaryDirectory() as tmp:
        store = LmdbBackend(Path(tmp))
        try:

            async def publish(k: int) -> None:
                await store.insert([("w1", i, body) for i in ids.many(k)])

            async def drain() -> int:
                (keys,) = await store.scan("w1", [(0, ID_MAX)], batch)
                await store.get("w1", keys)
                await store.delete("w1", keys)
                return len(keys)

            return await _phases(publish, drain, n, batch, window)
        finally:
            await store.close()


async def measure_engine(n: int, size: int, batch: int, window: int) -> Rates:
    """The queue engine (ids, partitions, leases, records) on the store, without HTTP."""
    body = b"x" * size
    with tempfile.TemporaryDirectory() as tmp:
        store = LmdbBackend(Path(tmp))
        try:
            catalog = Catalog(store)
            await catalog.create_queue("w1")
            queues = QueueService(store, catalog, MonotonicClock())

            async def publish(k: int) -> None:
                await queues.publish("w1", [body] * k)

            async def drain() -> int:
                got = await queues.receive("w1", batch)
                await queues.delete("w1", [m.id for m in got])
                return len(got)

            return await _phases(publish, drain, n, batch, window)
        finally:
            await store.close()
