"""Periodic metrics: queue levels and node levels, then a flush of the sinks."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from dynamiq.core.queues import QueueService
from dynamiq.errors import DynamiqError
from dynamiq.metrics.base import Metrics
from dynamiq.storage.base import StorageBackend

__all__ = ["Reporter"]

log = logging.getLogger("dynamiq.core")


class Reporter:
    """Reads levels that are not events (depth, in flight, commit latency) and flushes.

    Queue depths cost a store read per queue: they are read each round only
    when a sink pushes them (``queue_levels``, StatsD); a Prometheus scrape
    reads them itself when it comes.
    """

    def __init__(
        self,
        queues: QueueService,
        store: StorageBackend,
        metrics: Metrics,
        interval: float,
        cluster_size: Callable[[], int] = lambda: 1,
        queue_levels: bool = True,
    ) -> None:
        self._queues = queues
        self._queue_levels = queue_levels
        self._cluster_size = cluster_size
        self._store = store
        self._metrics = metrics
        self._interval = interval
        self._last = store.commit_stats()

    async def run_once(self) -> None:
        """Report every level once and flush the sinks."""
        if self._queue_levels:
            await self.report_queues()
        commits, seconds = self._store.commit_stats()
        done = commits - self._last[0]
        mean = (seconds - self._last[1]) / done if done else None
        self._last = (commits, seconds)
        self._metrics.node_level(self._cluster_size(), mean)
        self._metrics.flush()

    async def report_queues(self) -> None:
        """Report every queue's depth and leases in flight (a store read per queue)."""
        try:
            await self._queues.report()
        except DynamiqError as exc:
            log.warning("could not read queue depths: %s", exc)

    async def close(self) -> None:
        """Send what came since the last round, and release the sinks."""
        self._metrics.flush()
        self._metrics.close()

    async def reporter_loop(self) -> None:
        """Run a round every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(self._interval)
            await self.run_once()
