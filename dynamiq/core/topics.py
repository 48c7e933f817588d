"""TopicService: fan a published message out to the subscribed queues that take it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

from dynamiq.core.catalog import Catalog
from dynamiq.core.queues import QueueService
from dynamiq.core.routing.filters import Subject
from dynamiq.core.routing.notifications import Envelopes
from dynamiq.core.routing.subscriptions import Topic
from dynamiq.metrics.base import Metrics, MetricsFanout
from dynamiq.models import Notice, Outgoing, Published

__all__ = ["TopicPublished", "TopicService"]


class TopicPublished(NamedTuple):
    """A topic publish's copies: per queue that took any, their ids in request order
    (None where a message did not go there); per queue with a duplicate, which
    were; and which of the queues are push subscriptions' (the node's own)."""

    ids: dict[str, list[int | None]]
    duplicate: dict[str, list[bool]]
    pushed: frozenset[str] = frozenset()

    def for_clients(self) -> TopicPublished:
        """The copies in the queues a client knows of: push subscriptions' left out."""
        if not self.pushed:
            return self
        drop = self.pushed
        return TopicPublished(
            {q: v for q, v in self.ids.items() if q not in drop},
            {q: v for q, v in self.duplicate.items() if q not in drop},
        )


class TopicService:
    """Publish to topics: one copy per subscription that takes the message, each
    with its own id (see ``routing``); subscriptions that ask for it get the copy
    as an SNS notification (``notifications``)."""

    def __init__(
        self,
        catalog: Catalog,
        queues: QueueService,
        envelopes: Envelopes,
        metrics: Metrics | None = None,
    ) -> None:
        self._catalog = catalog
        self._queues = queues
        self._envelopes = envelopes
        self._metrics: Metrics = metrics or MetricsFanout([])

    async def publish(
        self,
        topic: str,
        messages: Sequence[bytes | Outgoing],
        notices: Sequence[Notice] | None = None,
    ) -> TopicPublished:
        """Store each message in every queue that takes it, in one commit; return,
        per queue that took any, the ids of its copies in request order (None
        where a message did not go there), with which were duplicates (each
        queue deduplicates its own copies).

        Either all copies are stored or an error is raised; an id is never
        returned for a copy that was not stored. ``notices`` name the messages
        in notifications (fresh ids otherwise).
        """
        subscribed = self._catalog.topic(topic)
        filtered_out: Counter[str] = Counter()
        routes = subscribed.route_all(
            [
                (m.routing_key, Subject(m.attributes, m.attribute_types, m.body))
                if isinstance(m, Outgoing)
                else (None, Subject(body=m))
                for m in messages
            ],
            filtered_out,
        )
        width = len(messages)
        # A queue subscribed before it exists (SNS takes that) gets nothing: failed copies.
        records = self._catalog.find_all(routes[0] if width == 1 else set().union(*routes))
        if width == 1:  # a broadcast: each queue found takes the message
            placed = [(0, q) for q in records]
        else:
            placed = [(i, q) for i, queues in enumerate(routes) for q in queues if q in records]
        wrapped = subscribed.enveloped & records.keys()
        if wrapped:
            given = notices or [Notice.new() for _ in messages]
            wrap = self._envelopes.wrap
            items = [
                (records[q], wrap(topic, messages[i], given[i]) if q in wrapped else messages[i])
                for i, q in placed
            ]
        else:
            items = [(records[q], messages[i]) for i, q in placed]
        stored = await self._queues.store_messages(items) if items else Published[int]()
        ids: dict[str, list[int | None]]
        if width == 1:  # a broadcast: each queue took the one message
            ids = {q: [mid] for q, mid in zip(records, stored, strict=True)}
        else:
            ids = {q: [None] * width for q in records}
            for (i, queue), mid in zip(placed, stored, strict=True):
                ids[queue][i] = mid
        duplicate: dict[str, list[bool]] = {}
        if stored.duplicate:
            for (i, queue), dup in zip(placed, stored.duplicate, strict=True):
                if dup:
                    duplicate.setdefault(queue, [False] * width)[i] = True
        self._count(topic, routes, filtered_out, placed, stored, subscribed)
        return TopicPublished(ids, duplicate, subscribed.pushed & records.keys())

    def _count(
        self,
        topic: str,
        routes: list[list[str]],
        filtered_out: Counter[str],
        placed: list[tuple[int, str]],
        stored: Published[int],
        subscribed: Topic,
    ) -> None:
        """Count a publish's messages, its copies stored, and those that went nowhere."""
        # A push subscription's copy is delivered when its endpoint takes it (``Pusher``).
        pushed = subscribed.pushed
        duplicates = stored.duplicate or [False] * len(placed)
        counted = {
            "published": len(routes),
            "delivered": sum(
                1
                for (_, q), dup in zip(placed, duplicates, strict=True)
                if not dup and q not in pushed
            ),
            "unrouted": sum(1 for queues in routes if not queues),
            "failed": sum(map(len, routes)) - len(placed),
            **{f"filtered_out_{why}": n for why, n in filtered_out.items()},
        }
        for event, count in counted.items():
            if count:
                self._metrics.topic_event(topic, event, count)
