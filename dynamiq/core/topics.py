"""TopicService: fan a published message out to every subscribed queue."""

from __future__ import annotations

from collections.abc import Sequence

from dynamiq.core.catalog import Catalog
from dynamiq.core.queues import QueueService
from dynamiq.models import Outgoing

__all__ = ["TopicService"]


class TopicService:
    """Publish to topics: one copy per subscribed queue, each with its own id."""

    def __init__(self, catalog: Catalog, queues: QueueService) -> None:
        self._catalog = catalog
        self._queues = queues

    async def publish(
        self, topic: str, messages: Sequence[bytes | Outgoing]
    ) -> dict[str, list[int]]:
        """Store every message in every subscriber in one commit; return ids per queue.

        Either all copies are stored or an error is raised; an id is never
        returned for a copy that was not stored.
        """
        subscribers = [self._catalog.queue(q) for q in self._catalog.topic(topic)]
        items = [(record, m) for record in subscribers for m in messages]
        ids = await self._queues.store_messages(items)
        out: dict[str, list[int]] = {r.name: [] for r in subscribers}
        for (record, _), mid in zip(items, ids, strict=True):
            out[record.name].append(mid)
        return out
