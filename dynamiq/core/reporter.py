"""Periodic metrics: queue levels and node levels, then a flush of the sinks."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from dynamiq.core.queues import QueueService
from dynamiq.core.rounds import every
from dynamiq.errors import DynamiqError
from dynamiq.metrics.base import Metrics
from dynamiq.storage.base import StorageBackend

__all__ = ["Reporter"]

log = logging.getLogger("dynamiq.core")


@dataclass(slots=True)
class Reporter:
    """Reads levels that are not events (depth, in flight, commit latency) and flushes.

    Queue depths cost a store read per queue: they are read each round only
    when a sink pushes them (``queue_levels``, StatsD); a Prometheus scrape
    reads them itself when it comes.
    """

    queues: QueueService
    store: StorageBackend
    metrics: Metrics
    interval: float  # seconds between rounds
    cluster_size: Callable[[], int] = lambda: 1
    queue_levels: bool = True
    _last: tuple[int, float] = field(init=False)  # the store's commits and their seconds

    def __post_init__(self) -> None:
        self._last = self.store.commit_stats()

    async def run_once(self) -> None:
        """Report every level once and flush the sinks."""
        if self.queue_levels:
            await self.report_queues()
        commits, seconds = self.store.commit_stats()
        done = commits - self._last[0]
        mean = (seconds - self._last[1]) / done if done else None
        self._last = (commits, seconds)
        self.metrics.node_level(self.cluster_size(), mean)
        self.metrics.flush()

    async def report_queues(self) -> None:
        """Report every queue's depth and leases in flight (a store read per queue)."""
        try:
            await self.queues.report()
        except DynamiqError as exc:
            log.warning("could not read queue depths: %s", exc)

    async def close(self) -> None:
        """Send what came since the last round, and release the sinks."""
        self.metrics.flush()
        self.metrics.close()

    async def reporter_loop(self) -> None:
        """Run a round every ``interval`` seconds until cancelled, the first one interval
        after start (a round reads every queue's depth: not while the node starts)."""
        await asyncio.sleep(self.interval)
        await every(self.interval, self.run_once, "metrics report")
