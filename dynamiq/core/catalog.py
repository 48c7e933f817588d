"""Queues, topics and subscriptions: kept in the store, cached in memory.

Store layout (``meta`` keys): ``q/<queue>`` holds the queue's settings and the
uid of its message bucket; ``t/<topic>`` marks a topic; ``s/<topic>/<queue>``
holds a subscription (its pattern and filter; empty when it takes everything);
``drop/<uid>`` marks a bucket whose deletion is under way. A queue re-created
under an old name gets a new uid, so it starts empty even while the old bucket
is still being dropped.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import replace
from typing import Any, Concatenate, ParamSpec, TypeVar

from dynamiq.core.clock import Clock, MonotonicClock
from dynamiq.core.routing.filters import FilterScope
from dynamiq.core.routing.push import PushEndpoint, subscription_id
from dynamiq.core.routing.subscriptions import Subscription, Topic
from dynamiq.errors import (
    Invalid,
    QueueExists,
    QueueInUse,
    QueueNotFound,
    TopicExists,
    TopicNotFound,
)
from dynamiq.models import QueueRecord, QueueSettings, validate_name
from dynamiq.storage.base import StorageBackend
from dynamiq.topic_settings import TopicSettings

__all__ = ["Catalog"]

log = logging.getLogger("dynamiq.core")


def _encode_queue(record: QueueRecord) -> bytes:
    return json.dumps(
        {
            "uid": record.uid,
            "settings": record.settings.to_dict(),
            "created_ms": record.created_ms,
            "modified_ms": record.modified_ms,
        }
    ).encode()


_SETTINGS = frozenset(f.name for f in dataclasses.fields(QueueSettings))


def _decode_queue(name: str, raw: bytes) -> QueueRecord:
    data: dict[str, Any] = json.loads(raw)
    # What a newer release added is left aside: the two serve together while a
    # rolling upgrade goes through the cluster.
    settings = {k: v for k, v in data["settings"].items() if k in _SETTINGS}
    # A queue kept before deduplication scopes were settings deduplicated a grouped
    # message's id within its group, and claimed it so: it goes on doing so.
    settings.setdefault("dedup_scope", "group")
    return QueueRecord(
        name,
        data["uid"],
        QueueSettings(**settings),
        data.get("created_ms", 0),
        data.get("modified_ms", 0),
    )


P = ParamSpec("P")
R = TypeVar("R")


def _change(
    method: Callable[Concatenate[Catalog, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[Catalog, P], Coroutine[Any, Any, R]]:
    """Mark a catalog change: counted before it reaches the store, announced once it did,
    and done once the announcement was heard."""

    @functools.wraps(method)
    async def change(self: Catalog, /, *args: P.args, **kwargs: P.kwargs) -> R:
        self._changes += 1
        result = await method(self, *args, **kwargs)
        await self.on_change()
        return result

    return change


async def _unheard() -> None:
    """A node alone: no one to tell of a change."""


class Catalog:
    """The names this node knows, read through to the store on every change."""

    def __init__(
        self,
        store: StorageBackend,
        clock: Clock | None = None,
        on_change: Callable[[], Awaitable[None]] = _unheard,
    ) -> None:
        self._store = store
        self._clock = clock or MonotonicClock()
        self._queues: dict[str, QueueRecord] = {}
        self._topics: dict[str, Topic] = {}
        # Bumped by every change made here, before it reaches the store: a
        # reload whose read raced with a change must not put back what the
        # change replaced (the next reload will see both).
        self._changes = 0
        # Awaited after every change this node made: the cluster tells its peers,
        # and returns once every live one has reloaded (any node knows the change
        # once it is answered).
        self.on_change = on_change

    # -- reading (from the cache) ------------------------------------------

    def queue(self, name: str) -> QueueRecord:
        """Return a queue, or raise ``QueueNotFound``."""
        record = self._queues.get(name)
        if record is None:
            raise QueueNotFound(name)
        return record

    def find(self, name: str) -> QueueRecord | None:
        """Return a queue, or None."""
        return self._queues.get(name)

    def queues(self) -> list[str]:
        """Return every queue name, sorted."""
        return sorted(self._queues)

    def topic(self, name: str) -> Topic:
        """Return a topic (its subscriptions), or raise ``TopicNotFound``."""
        topic = self._topics.get(name)
        if topic is None:
            raise TopicNotFound(name)
        return topic

    def topics(self) -> list[str]:
        """Return every topic name, sorted."""
        return sorted(self._topics)

    def pushes(self) -> list[tuple[str, Subscription]]:
        """Return every push subscription with its topic, by subscription id."""
        found = [
            (topic, s)
            for topic, subscribed in self._topics.items()
            for s in subscribed.subscriptions.values()
            if s.endpoint is not None
        ]
        return sorted(found, key=lambda pair: pair[1].queue)

    def push(self, subscription: str) -> tuple[str, Subscription] | None:
        """Return the push subscription of this id with its topic, or None."""
        for topic, found in self.pushes():
            if subscription_id(found.queue) == subscription:
                return topic, found
        return None

    def records(self) -> list[QueueRecord]:
        """Return every queue, sorted by name."""
        return [self._queues[name] for name in sorted(self._queues)]

    def uids(self) -> set[str]:
        """Return the bucket uid of every live queue."""
        return {r.uid for r in self._queues.values()}

    def dead_letter_users(self, name: str) -> list[str]:
        """Return the queues (other than itself) whose dead-letter queue is ``name``, sorted."""
        return sorted(
            q for q, r in self._queues.items() if r.settings.dead_letter_queue == name and q != name
        )

    def _check_references(self, record: QueueRecord) -> None:
        target = record.settings.dead_letter_queue
        if target is None:
            return
        if target == record.name:
            raise Invalid("a queue cannot be its own dead_letter_queue", "dead_letter_queue")
        if target not in self._queues:
            raise Invalid(f"dead_letter_queue {target!r} does not exist", "dead_letter_queue")

    # -- loading -------------------------------------------------------------

    async def reload(self) -> bool:
        """Replace the cache with what the store holds now.

        Returns False, changing nothing, when a change was made through this
        catalog while the store was being read.
        """
        changes = self._changes
        entries = await self._store.meta_scan("")
        if changes != self._changes:
            return False
        queues: dict[str, QueueRecord] = {}
        topics: dict[str, list[Subscription]] = {}
        settings: dict[str, TopicSettings] = {}
        for key, raw in entries.items():
            kind, _, rest = key.partition("/")
            if kind == "q":
                queues[rest] = _decode_queue(rest, raw)
            elif kind == "t":
                topics.setdefault(rest, [])
                settings[rest] = TopicSettings.decode(raw)
        for key, raw in entries.items():
            kind, _, rest = key.partition("/")
            topic, _, queue = rest.partition("/")
            if kind == "s" and topic in topics:  # its queue may be yet to come (SNS)
                topics[topic].append(Subscription.decode(queue, raw))
        self._queues = queues
        known = self._topics
        self._topics = {
            t: known.get(t, Topic()).kept_if_same(subs, settings[t]) for t, subs in topics.items()
        }
        return True

    async def pending_drops(self, now_ms: int) -> list[str]:
        """Return the uids of buckets due to be dropped by ``now_ms`` and not dropped yet."""
        markers = await self._store.meta_scan("drop/")
        return [key.partition("/")[2] for key, due in markers.items() if int(due or 0) <= now_ms]

    async def finish_drop(self, uid: str) -> None:
        """Delete a dropped queue's messages, then forget the drop.

        A bucket a queue uses again is kept: a settings change made elsewhere
        with the record read before a purge or deletion can put its uid back,
        and what was published there since must not go with the drop.
        """
        if uid in self.uids():
            log.warning("bucket %s is in use again (a change raced its drop): kept", uid)
        else:
            await self._store.drop(uid)
        await self._store.meta_delete([f"drop/{uid}"])

    # -- queues --------------------------------------------------------------

    @_change
    async def create_queue(
        self, name: str, settings: QueueSettings | None = None, internal: bool = False
    ) -> QueueRecord:
        """Create a queue; raise ``QueueExists`` if the name is taken. An ``internal``
        one's name is the node's own (a push subscription's), no client's."""
        if not internal:
            validate_name("queue", name)
        now_ms = self._clock.wall_ms()
        record = QueueRecord(
            name, secrets.token_hex(8), settings or QueueSettings(), now_ms, now_ms
        )
        self._check_references(record)
        if not await self._store.meta_create(f"q/{name}", _encode_queue(record)):
            raise QueueExists(name)
        self._queues[name] = record
        return record

    @_change
    async def configure_queue(self, name: str, changes: dict[str, Any]) -> QueueRecord:
        """Change some settings of a queue, validated; effective at once."""
        current = self.queue(name)
        record = replace(
            current, settings=current.settings.updated(changes), modified_ms=self._clock.wall_ms()
        )
        self._check_references(record)
        await self._store.meta_put({f"q/{name}": _encode_queue(record)})
        self._queues[name] = record
        return record

    @_change
    async def delete_queue(self, name: str) -> str:
        """Delete a queue and its subscriptions; return the uid of the bucket to drop."""
        record = self.queue(name)
        users = self.dead_letter_users(name)
        if users:
            raise QueueInUse(name, users)
        await self._store.meta_put({f"drop/{record.uid}": b""})
        subs = [f"s/{t}/{name}" for t, topic in self._topics.items() if name in topic.subscriptions]
        await self._store.meta_delete([f"q/{name}", *subs])
        self._queues.pop(name, None)
        self._topics = {t: topic.without(name) for t, topic in self._topics.items()}
        return record.uid

    @_change
    async def purge_queue(self, name: str, drop_at_ms: int) -> str:
        """Give a queue a new, empty bucket; the old one is dropped from ``drop_at_ms`` on.

        Returns the old bucket's uid. The wait lets every node switch to the
        new bucket before the old one goes, so that nothing a lagging node
        stores meanwhile is dropped with it unseen.
        """
        current = self.queue(name)
        record = replace(current, uid=secrets.token_hex(8))
        await self._store.meta_put(
            {f"drop/{current.uid}": b"%d" % drop_at_ms, f"q/{name}": _encode_queue(record)}
        )
        self._queues[name] = record
        return current.uid

    # -- topics --------------------------------------------------------------

    @_change
    async def create_topic(self, name: str, settings: TopicSettings | None = None) -> None:
        """Create a topic; raise ``TopicExists`` if the name is taken."""
        validate_name("topic", name)
        settings = settings or TopicSettings()
        if not await self._store.meta_create(f"t/{name}", settings.encode()):
            raise TopicExists(name)
        self._topics[name] = Topic(settings=settings)

    @_change
    async def configure_topic(self, name: str, settings: TopicSettings) -> None:
        """Replace a topic's settings (its subscriptions stay)."""
        current = self.topic(name)
        await self._store.meta_put({f"t/{name}": settings.encode()})
        self._topics[name] = current.with_settings(settings)

    @_change
    async def delete_topic(self, name: str) -> None:
        """Delete a topic and its subscriptions (not the queues)."""
        subscribers = self.topic(name).queues()
        await self._store.meta_delete([f"t/{name}", *(f"s/{name}/{q}" for q in subscribers)])
        self._topics.pop(name, None)

    @_change
    async def subscribe(
        self,
        topic: str,
        queue: str,
        pattern: object = None,
        filter_policy: object = None,
        envelope: object = False,
        filter_scope: FilterScope = "attributes",
        strict: bool = False,
        endpoint: PushEndpoint | None = None,
        missing_ok: bool = False,
    ) -> Topic:
        """Subscribe a queue to a topic, or change what it takes (a routing-key
        ``pattern``, a ``filter_policy`` on the attributes or, by ``filter_scope``,
        the body; ``strict``: only in SNS's shape) and how (``envelope``: as SNS
        notifications; to an ``endpoint``, a push subscription's queue); return the
        topic. With ``missing_ok`` the queue may not exist yet (SNS takes that): the
        copies it would get are counted as failed until it does."""
        current = self.topic(topic)
        if endpoint is None and queue in current.subscriptions:
            endpoint = current.subscriptions[queue].endpoint  # a push subscription stays one
        if endpoint is None:
            validate_name("queue", queue, "queue")
        if not missing_ok:
            self.queue(queue)
        subscription = Subscription.parse(
            queue,
            pattern,
            filter_policy,
            envelope,
            filter_scope,
            lenient=not strict,
            endpoint=endpoint,
        )
        await self._store.meta_put({f"s/{topic}/{queue}": subscription.encode()})
        self._topics[topic] = current.with_subscription(subscription)
        return self._topics[topic]

    @_change
    async def unsubscribe(self, topic: str, queue: str) -> Topic:
        """Unsubscribe a queue (idempotent); return the topic."""
        current = self.topic(topic)
        await self._store.meta_delete([f"s/{topic}/{queue}"])
        self._topics[topic] = current.without(queue)
        return self._topics[topic]
