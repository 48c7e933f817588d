"""What handlers reach through the app: one typed key holding the node's services."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from dynamiq.cluster.base import Membership
from dynamiq.cluster.coordinator import Coordinator
from dynamiq.config import LimitsSettings
from dynamiq.core.catalog import Catalog
from dynamiq.core.janitor import Janitor
from dynamiq.core.queues import QueueService
from dynamiq.core.topics import TopicService
from dynamiq.metrics.base import Metrics
from dynamiq.storage.base import StorageBackend

__all__ = ["SERVICES", "Services"]


@dataclass(frozen=True, slots=True)
class Services:
    """The engine as the HTTP layer sees it."""

    store: StorageBackend
    catalog: Catalog
    queues: QueueService
    topics: TopicService
    janitor: Janitor
    limits: LimitsSettings
    membership: Membership
    coordinator: Coordinator
    metrics: Metrics
    render_metrics: Callable[[], bytes]  # the Prometheus text exposition
    peer_token: str | None = None  # what members show on internal routes; None: no gossip

    async def delete_queue(self, name: str) -> None:
        """Delete a queue now; its messages are dropped in the background."""
        await self.catalog.delete_queue(name)
        self.queues.forget_dropped()
        self.janitor.kick()


SERVICES = web.AppKey("services", Services)
