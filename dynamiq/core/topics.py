"""TopicService: fan a published message out to the subscribed queues that take it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol

from dynamiq.core.catalog import Catalog
from dynamiq.core.queues import QueueService
from dynamiq.core.routing.filters import Subject
from dynamiq.core.routing.notifications import Envelopes
from dynamiq.core.routing.subscriptions import Topic
from dynamiq.core.spreads import Spreader, spread_message, spread_settings
from dynamiq.metrics.base import Metrics, MetricsFanout
from dynamiq.models import Notice, Outgoing, Published, QueueRecord

__all__ = ["Crossings", "TopicPublished", "TopicService"]


class Crossings(Protocol):
    """Where a topic's subscriptions cross from one owner to another (an application's
    topic, another's queue), and whether the queue's owner lets the topic in."""

    def foreign(self, topic: str, queues: list[str]) -> list[str]:
        """The queues of ``queues`` that another owner than ``topic``'s has."""

    def admits(self, topic: str, queue: QueueRecord) -> bool:
        """Whether ``queue`` (another owner's) takes what ``topic`` delivers."""


WIDE_KEPT = 64  # wide topics whose queues are kept found (``_Wide``), at most


class TopicPublished(NamedTuple):
    """A topic publish's copies: per queue that took any, their ids in request order
    (None where a message did not go there); per queue with a duplicate, which
    were; which of the queues are the node's own (push subscriptions', the
    archive); and of
    a message's spread (one publish of one message), its queues."""

    ids: dict[str, list[int | None]]
    duplicate: dict[str, list[bool]]
    pushed: frozenset[str] = frozenset()
    later: frozenset[str] | None = None  # queues whose copies follow the answer (spreads)

    def stored_now(self) -> dict[str, list[int | None]]:
        """The ids of the copies stored by the time of the answer, per queue."""
        later = self.later
        if not later:
            return self.ids
        if len(later) == len(self.ids):  # every one (``later`` is among them)
            return {}
        return {q: v for q, v in self.ids.items() if q not in later}

    def for_clients(self) -> TopicPublished:
        """The copies in the queues a client knows of: the node's own left out."""
        if not self.pushed:
            return self
        drop = self.pushed
        return TopicPublished(
            {q: v for q, v in self.ids.items() if q not in drop},
            {q: v for q, v in self.duplicate.items() if q not in drop},
            later=self.later,
        )


class _Wide(NamedTuple):
    """A wide topic's queues as a publish of one message finds them (``names`` in
    order, their ``records``), and what they ask of its copies: whether every one
    may take it behind the answer (``spread``), and one of them where all store it
    alike (``alike``). Kept for the next publish while neither the topic nor any
    queue changed (``version``: the queue index's)."""

    topic: Topic
    version: int
    names: list[str]
    records: dict[str, QueueRecord]
    later: frozenset[str]
    spread: bool
    alike: QueueRecord | None


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
        spreader: Spreader | None = None,
        crossings: Crossings | None = None,
    ) -> None:
        self._catalog = catalog
        self._crossings = crossings
        self._foreign: dict[str, tuple[Topic, list[str]]] = {}  # by topic, as last seen
        self._spreader = spreader
        self._queues = queues
        self._envelopes = envelopes
        self._metrics: Metrics = metrics or MetricsFanout([])
        self._wide: dict[str, _Wide] = {}  # by topic, the last used last

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
        returned for a copy that was not stored, except that a message for more
        than ``limits.syncfanout`` queues is stored once and its copies follow
        the answer (``spreads``: those queues are ``TopicPublished.later``).
        ``notices`` name the messages in notifications (fresh ids otherwise).
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
        refused = self._refused(topic, subscribed)
        if refused:  # copies another owner's queue does not let in are not made
            routes = [[q for q in queues if q not in refused] for queues in routes]
        width = len(messages)
        wide = self._wide_of(topic, subscribed, routes[0]) if width == 1 else None
        if wide is not None and wide.spread and spread_message(messages[0]):
            assert self._spreader is not None  # a wide topic's queues are found for it
            m = messages[0]
            mid = await self._spreader.broadcast(wide.names, wide.alike, wide.records, m)
            copies: dict[str, list[int | None]] = {q: [mid] for q in wide.names}
            placed = [(0, q) for q in wide.names]
            self._count(topic, routes, filtered_out, placed, Published(), subscribed)
            return TopicPublished(copies, {}, later=wide.later)
        # A queue subscribed before it exists (SNS takes that) gets nothing: failed copies.
        if wide is not None:
            records = wide.records
        else:
            records = self._catalog.find_all(routes[0] if width == 1 else set().union(*routes))
        if width == 1:  # a broadcast: each queue found takes the message
            placed = [(0, q) for q in records]
        else:
            placed = [(i, q) for i, queues in enumerate(routes) for q in queues if q in records]
        stored, later = await self._copies(topic, messages, notices, records, placed, subscribed)
        self._count(topic, routes, filtered_out, placed, stored, subscribed)
        own = subscribed.own & records.keys() if subscribed.own else frozenset()
        return TopicPublished(*_per_queue(width, records, placed, stored), own, later)

    def _refused(self, name: str, topic: Topic) -> set[str]:
        """The queues of other owners subscribed to ``topic`` whose owners do not let it
        in now (their policies are read at each publish; who they are, once a version)."""
        if self._crossings is None:
            return set()
        kept = self._foreign.get(name)
        if kept is None or kept[0] is not topic:
            kept = (topic, self._crossings.foreign(name, topic.queues()))
            self._foreign[name] = kept
            if len(self._foreign) > WIDE_KEPT:
                del self._foreign[next(iter(self._foreign))]
        if not kept[1]:
            return set()
        records = self._catalog.find_all(kept[1])
        return {
            q for q in kept[1] if q not in records or not self._crossings.admits(name, records[q])
        }

    def _wide_of(self, name: str, topic: Topic, routed: list[str]) -> _Wide | None:
        """The queues of a publish of one message to ``topic`` that ``routed`` names, when
        they are more than a spread's least (``limits.syncfanout``); None where not. Kept
        for the next publish where they are every subscribed queue."""
        spreader = self._spreader
        if spreader is None or len(routed) <= spreader.widest:
            return None
        index = self._catalog.index
        every = len(routed) == len(topic.subscriptions)
        kept = self._wide.pop(name, None) if every else None
        if kept is None or kept.topic is not topic or kept.version != index.version:
            kept = _wide(topic, index.version, index.found(routed))
        if every:
            self._wide[name] = kept
            if len(self._wide) > WIDE_KEPT:
                del self._wide[next(iter(self._wide))]
        return kept

    async def _copies(
        self,
        topic: str,
        messages: Sequence[bytes | Outgoing],
        notices: Sequence[Notice] | None,
        records: dict[str, QueueRecord],
        placed: list[tuple[int, str]],
        subscribed: Topic,
    ) -> tuple[Published[int], frozenset[str] | None]:
        """Store the copies ``placed`` says (per copy, its message and queue); return
        their ids, and of one message's copies made behind the answer, their queues."""
        wrapped = subscribed.enveloped & records.keys() if subscribed.enveloped else None
        if wrapped:  # one envelope per message, whichever queues it goes to
            given = notices or [Notice.new() for _ in messages]
            envelopes = [self._envelopes.wrap(topic, m, given[i]) for i, m in enumerate(messages)]
            items = [(records[q], (envelopes if q in wrapped else messages)[i]) for i, q in placed]
        else:
            items = [(records[q], messages[i]) for i, q in placed]
        spreads = self._spreads(items, placed, subscribed.pushed)
        stored = await self._store(items, spreads)
        if len(messages) == 1 and spreads:
            return stored, frozenset(placed[k][1] for k in spreads[0])
        return stored, None

    async def _store(
        self, items: list[tuple[QueueRecord, bytes | Outgoing]], spreads: list[list[int]]
    ) -> Published[int]:
        """Store the copies ``items``: in this commit, but those at ``spreads`` (per
        message, its copies' positions) once each, copied behind the answer. Return
        the copies' ids."""
        if not spreads:
            return await self._queues.store_messages(items) if items else Published[int]()
        assert self._spreader is not None  # there are spreads
        later = {k for positions in spreads for k in positions}
        now = [k for k in range(len(items)) if k not in later]
        stored = Published[int]()
        if now:
            stored = await self._queues.store_messages([items[k] for k in now])
        ids = [0] * len(items)
        duplicate = [False] * len(items)
        for k, mid, dup in zip(now, stored, stored.duplicate or [False] * len(now), strict=True):
            ids[k], duplicate[k] = mid, dup
        for positions in spreads:
            mid = await self._spreader.hold([items[k] for k in positions])
            for k in positions:
                ids[k] = mid
        return Published(ids, duplicate if stored.duplicate else [])

    def _spreads(
        self,
        items: list[tuple[QueueRecord, bytes | Outgoing]],
        placed: list[tuple[int, str]],
        pushed: frozenset[str],
    ) -> list[list[int]]:
        """Per message copied into more than ``widest`` queues that may take it behind
        the answer, the positions in ``items`` of those copies."""
        spreader = self._spreader
        if spreader is None or len(items) <= spreader.widest:
            return []
        # Whether a message, and a queue's settings (shared by queues with the same), may.
        messages: dict[int, bool] = {}
        settings: dict[int, bool] = {}
        by_message: dict[int, list[int]] = {}
        for k, ((i, queue), (record, m)) in enumerate(zip(placed, items, strict=True)):
            free = messages.get(id(m))
            if free is None:
                free = messages[id(m)] = spread_message(m)
            held = settings.get(id(record.settings))
            if held is None:
                held = settings[id(record.settings)] = spread_settings(record.settings)
            if free and held and queue not in pushed:
                by_message.setdefault(i, []).append(k)
        return [positions for positions in by_message.values() if len(positions) > spreader.widest]

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
        # A push subscription's copy is delivered when its endpoint takes it (``Pusher``);
        # an archive's is no delivery.
        pushed = subscribed.own
        if stored.duplicate or pushed:
            duplicates = stored.duplicate or [False] * len(placed)
            delivered = sum(
                1
                for (_, q), dup in zip(placed, duplicates, strict=True)
                if not dup and q not in pushed
            )
        else:  # every copy (a broadcast's thousands)
            delivered = len(placed)
        counted = {
            "published": len(routes),
            "delivered": delivered,
            "unrouted": sum(1 for queues in routes if not queues),
            "failed": sum(map(len, routes)) - len(placed),
            **{f"filtered_out_{why}": n for why, n in filtered_out.items()},
        }
        for event, count in counted.items():
            if count:
                self._metrics.topic_event(topic, event, count)


def _wide(topic: Topic, version: int, records: dict[str, QueueRecord]) -> _Wide:
    """What a publish of one message into ``records``' queues may do with its copies."""
    names = list(records)
    distinct = {id(record.settings): record.settings for record in records.values()}
    spread = (
        all(map(spread_settings, distinct.values()))
        and topic.pushed.isdisjoint(names)
        and topic.enveloped.isdisjoint(names)
    )
    compressed = {s.compressed_messages for s in distinct.values()}
    alike = next(iter(records.values())) if len(compressed) == 1 else None
    return _Wide(topic, version, names, records, frozenset(names), spread, alike)


def _per_queue(
    width: int, queues: Iterable[str], placed: list[tuple[int, str]], stored: Published[int]
) -> tuple[dict[str, list[int | None]], dict[str, list[bool]]]:
    """Per queue, the ids of its copies in request order (None where a message did not
    go there), and which of them were duplicates (only for a queue with any)."""
    ids: dict[str, list[int | None]]
    if width == 1:  # a broadcast: each queue took the one message
        ids = {q: [mid] for q, mid in zip(queues, stored, strict=True)}
    else:
        ids = {q: [None] * width for q in queues}
        for (i, queue), mid in zip(placed, stored, strict=True):
            ids[queue][i] = mid
    duplicate: dict[str, list[bool]] = {}
    if stored.duplicate:
        for (i, queue), dup in zip(placed, stored.duplicate, strict=True):
            if dup:
                duplicate.setdefault(queue, [False] * width)[i] = True
    return ids, duplicate
