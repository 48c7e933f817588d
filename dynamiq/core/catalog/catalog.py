"""Queues, topics and subscriptions: kept in the store, cached in memory.

Store layout (``meta`` keys): ``q/<queue>`` holds the queue's settings and the
uid of its message bucket; ``t/<topic>`` marks a topic; ``s/<topic>/<queue>``
holds a subscription (its pattern and filter; empty when it takes everything);
``drop/<uid>`` marks a bucket whose deletion is under way; ``log/<seq>`` numbers
the changes (``log``). A queue re-created under an old name gets a new
uid, so it starts empty even while the old bucket is still being dropped.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import replace
from typing import Any, Concatenate, ParamSpec, TypeVar

from dynamiq.core.catalog.codec import decode_queue, encode_queue, same_version
from dynamiq.core.catalog.index import QueueIndex
from dynamiq.core.catalog.log import CatalogLog
from dynamiq.core.catalog.news import (
    CatalogNews,
    Freshness,
    Turns,
    collecting,
    subscription_key,
    subscription_of,
    told,
    touch,
)
from dynamiq.core.catalog.topics import TopicIndex
from dynamiq.core.clock import Clock, MonotonicClock
from dynamiq.core.push.documents import PushEndpoint
from dynamiq.core.routing.filters import FilterScope
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
from dynamiq.models.topics import TopicSettings
from dynamiq.storage.base import StorageBackend

__all__ = ["Catalog"]

log = logging.getLogger("dynamiq.core")

YIELD_EVERY = 500  # records a whole read takes between turns of the event loop

P = ParamSpec("P")
R = TypeVar("R")


def _change(
    method: Callable[Concatenate[Catalog, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[Catalog, P], Coroutine[Any, Any, R]]:
    """Mark a catalog change: counted before it reaches the store, announced once it did,
    and done once the announcement was heard."""

    @functools.wraps(method)
    async def change(self: Catalog, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with collecting() as touched:
            result = await method(self, *args, **kwargs)
        news = told(touched)
        if news:
            await self._log.append(news)
        await self.on_change(news)
        return result

    return change


async def _unheard(news: CatalogNews) -> None:
    """A node alone: no one to tell of a change."""


class Catalog:
    """The names this node knows, read through to the store on every change."""

    def __init__(
        self,
        store: StorageBackend,
        clock: Clock | None = None,
        on_change: Callable[[CatalogNews], Awaitable[None]] = _unheard,
        keep_log: float = 60.0,
    ) -> None:
        self._store = store
        self._clock = clock or MonotonicClock()
        self._log = CatalogLog(store, self._clock, keep_log)
        self._queues = QueueIndex()
        self._topics = TopicIndex()
        # What a read may take: a read racing with a change (made here, or read
        # by a faster read) must not put back what the change replaced.
        self._fresh = Freshness()
        self._turns = Turns()  # a queue's record rewritten by one change at a time
        # Awaited after every change this node made, with what it touched: the
        # cluster tells its peers, and returns once every live one has read it
        # (any node knows the change once it is answered).
        self.on_change = on_change

    def _set_queue(self, name: str, record: QueueRecord | None) -> None:
        """Apply a change made here to a queue's cached record (None: gone)."""
        if record is None:
            self._queues.pop(name)
        else:
            self._queues.put(record)
        self._fresh.changed("q", name)
        touch("q", name)

    def _set_topic(self, name: str, topic: Topic | None, changed: str | None = None) -> None:
        """Apply a change made here to a topic's cached record (None: gone); ``changed``:
        only the subscription of that queue changed (told as such: the other
        processes read that subscription again, not the whole topic)."""
        self._topics.keep(name, topic, changed)
        kind, key = ("t", name) if changed is None else ("s", subscription_key(name, changed))
        self._fresh.changed(kind, key)
        touch(kind, key)

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

    def find_all(self, names: Iterable[str]) -> dict[str, QueueRecord]:
        """Return those of the queues ``names`` that exist, by name."""
        return self._queues.found(names)

    def queues(self) -> list[str]:
        """Return every queue name, sorted."""
        return self._queues.names()

    @property
    def index(self) -> QueueIndex:
        """The queues with the indexes upkeep reads (retained, expiring, by uid)."""
        return self._queues

    def topic(self, name: str) -> Topic:
        """Return a topic (its subscriptions), or raise ``TopicNotFound``."""
        topic = self._topics.get(name)
        if topic is None:
            raise TopicNotFound(name)
        return topic

    def topics(self) -> list[str]:
        """Return every topic name, sorted."""
        return self._topics.names()

    def pushes(self) -> list[tuple[str, Subscription]]:
        """Return every push subscription with its topic, by subscription id."""
        return self._topics.pushes()

    def push(self, subscription: str) -> tuple[str, Subscription] | None:
        """Return the push subscription of this id with its topic, or None."""
        return self._topics.push(subscription)

    def records(self) -> list[QueueRecord]:
        """Return every queue, sorted by name."""
        return self._queues.records()

    def dead_letter_users(self, name: str) -> list[str]:
        """Return the queues (other than itself) whose dead-letter queue is ``name``, sorted."""
        return self._queues.users_of(name)

    def _check_references(self, record: QueueRecord) -> None:
        target = record.settings.dead_letter_queue
        if target is None:
            return
        if target == record.name:
            raise Invalid("a queue cannot be its own dead_letter_queue", "dead_letter_queue")
        if target not in self._queues:
            raise Invalid(f"dead_letter_queue {target!r} does not exist", "dead_letter_queue")

    # -- loading -------------------------------------------------------------

    async def follow(self) -> set[str]:
        """Read what changed through other processes since the last call, as the log
        says (the whole catalog when this process fell behind it); return the uids
        no queue uses any more."""
        found = await self._log.follow()
        if found is None:
            return await self.reload()
        if not found:
            return set()
        return await self.refresh(CatalogNews.merged(found))

    async def trim_log(self) -> None:
        """Delete the log's entries too old to keep."""
        await self._log.trim()

    async def reload(self) -> set[str]:
        """Read the whole catalog again; return the uids no queue uses any more."""
        ticket = self._fresh.start()
        try:
            await self._log.seek_tail()  # what changes after is followed from there
            entries = await self._store.meta_scan("")
        except BaseException:
            self._fresh.finish(ticket)
            raise
        queues: dict[str, QueueRecord] = {}
        settings: dict[str, TopicSettings] = {}
        subscriptions: dict[str, list[Subscription]] = {}
        for n, (key, raw) in enumerate(entries.items()):
            if n % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)  # a million queues take seconds: others go on meanwhile
            kind, _, rest = key.partition("/")
            if kind == "q":
                kept = same_version(self._queues.get(rest), raw)
                queues[rest] = kept if kept is not None else decode_queue(rest, raw)
            elif kind == "t":
                settings[rest] = TopicSettings.decode(raw)
            elif kind == "s":
                topic, _, queue = rest.partition("/")
                subscriptions.setdefault(topic, []).append(Subscription.decode(queue, raw))
        # The queues read, then those known here that the read did not find (gone)
        unread = (name for name in self._queues.names() if name not in queues)
        gone = await self._take_queues(ticket, queues, [queues, unread])
        topics = {
            t: (settings[t], subscriptions.get(t, [])) if t in settings else None
            for t in set(settings).union(self._topics.names())
        }
        self._take_topics(ticket, topics)
        self._fresh.finish(ticket)
        return gone

    async def refresh(self, news: CatalogNews) -> set[str]:
        """Read again the queues and topics ``news`` names (a change made through another
        process); return the uids no queue uses any more."""
        ticket = self._fresh.start()
        try:
            found = {q: await self._store.meta_get(f"q/{q}") for q in sorted(news.queues)}
            topics: dict[str, tuple[TopicSettings, list[Subscription]] | None] = {}
            for t in sorted(news.topics):
                raw = await self._store.meta_get(f"t/{t}")
                subs = await self._store.meta_scan(f"s/{t}/")
                topics[t] = (
                    None
                    if raw is None
                    else (
                        TopicSettings.decode(raw),
                        [Subscription.decode(k.rpartition("/")[2], v) for k, v in subs.items()],
                    )
                )
            # One subscription each, of the topics not read whole
            alone = sorted(k for k in news.subscriptions if subscription_of(k)[0] not in topics)
            subscriptions = {key: await self._store.meta_get(f"s/{key}") for key in alone}
        except BaseException:
            self._fresh.finish(ticket)
            raise
        queues = {q: decode_queue(q, raw) for q, raw in found.items() if raw is not None}
        gone = await self._take_queues(ticket, queues, [found])
        self._take_topics(ticket, topics)
        self._take_subscriptions(ticket, subscriptions)
        self._fresh.finish(ticket)
        return gone

    async def _take_queues(
        self, ticket: int, read: dict[str, QueueRecord], names: Iterable[Iterable[str]]
    ) -> set[str]:
        """Take what a read found of ``names`` (each once; absent from ``read``: gone),
        where nothing newer was taken; return the uids let go. A million names take
        turns with the rest of the loop: no step walks them all at once."""
        mark = self._fresh.overtaking(ticket)
        gone: set[str] = set()
        for n, name in enumerate(itertools.chain.from_iterable(names)):
            if n % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
            if not self._fresh.may_take(ticket, "q", name):
                continue
            before, now = self._queues.get(name), read.get(name)
            if before is not None and (now is None or now.uid != before.uid):
                gone.add(before.uid)
            if now is None:
                self._queues.pop(name)
            elif now is not before:  # the record a whole read found unchanged is kept
                self._queues.put(now)
            if mark:
                self._fresh.took(ticket, "q", name)
        # Not a bucket some queue known here still uses (none, normally)
        return {uid for uid in gone if self._queues.by_uid(uid) is None}

    def _take_topics(
        self,
        ticket: int,
        read: dict[str, tuple[TopicSettings, list[Subscription]] | None],
    ) -> None:
        mark = self._fresh.overtaking(ticket)
        for name, found in read.items():
            if not self._fresh.may_take(ticket, "t", name):
                continue
            if found is None:
                self._topics.keep(name, None)
            else:
                known, subscriptions = self._topics.get(name) or Topic(), found[1]
                # A subscription changed since the read began stays as it is now
                if kept := self._fresh.kept_since(ticket, "s", subscription_key(name, "")):
                    stay = {subscription_of(key)[1] for key in kept}
                    subscriptions = [s for s in subscriptions if s.queue not in stay]
                    subscriptions += [s for q in stay if (s := known.subscriptions.get(q))]
                self._topics.keep(name, known.kept_if_same(subscriptions, found[0]))
            if mark:
                self._fresh.took(ticket, "t", name)

    def _take_subscriptions(self, ticket: int, read: dict[str, bytes | None]) -> None:
        """Take the subscriptions a read found (``topic/queue``: stored form, or None
        when there is none), one each, where nothing newer was taken: of the topic
        (a whole read, or its deletion), or of the subscription."""
        mark = self._fresh.overtaking(ticket)
        for key, raw in read.items():
            name, queue = subscription_of(key)
            known = self._topics.get(name)
            if known is None or not self._fresh.may_take(ticket, "t", name):
                continue  # a topic unknown here is read whole, with its news
            if not self._fresh.may_take(ticket, "s", key):
                continue
            if raw is None:
                changed = known.without(queue)
            else:
                changed = known.with_subscription(Subscription.decode(queue, raw))
            self._topics.keep(name, changed, queue)
            if mark:
                self._fresh.took(ticket, "s", key)

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
        if self._queues.by_uid(uid) is not None:
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
        if not await self._store.meta_create(f"q/{name}", encode_queue(record)):
            raise QueueExists(name)
        self._set_queue(name, record)
        return record

    @_change
    async def configure_queue(self, name: str, changes: dict[str, Any]) -> QueueRecord:
        """Change some settings of a queue, validated; effective at once."""
        async with self._turns.of(name):
            current = self.queue(name)
            # Each version of a record is later than the one before (``same_version``)
            modified_ms = max(self._clock.wall_ms(), current.modified_ms + 1)
            record = replace(
                current, settings=current.settings.updated(changes), modified_ms=modified_ms
            )
            self._check_references(record)
            await self._store.meta_put({f"q/{name}": encode_queue(record)})
            self._set_queue(name, record)
            return record

    @_change
    async def delete_queue(self, name: str) -> str:
        """Delete a queue and its subscriptions; return the uid of the bucket to drop."""
        async with self._turns.of(name):
            record = self.queue(name)
            users = self.dead_letter_users(name)
            if users:
                raise QueueInUse(name, users)
            subscribed = [t for t, topic in self._topics.items() if name in topic.subscriptions]
            # The drop's mark first: a crash between leaves a bucket to drop, never one lost
            await self._store.meta_put(
                {f"drop/{record.uid}": b""}, [f"q/{name}", *(f"s/{t}/{name}" for t in subscribed)]
            )
            self._set_queue(name, None)
        for t in subscribed:
            if (topic := self._topics.get(t)) is not None:
                self._set_topic(t, topic.without(name), name)
        return record.uid

    @_change
    async def purge_queue(self, name: str, drop_at_ms: int) -> str:
        """Give a queue a new, empty bucket; the old one is dropped from ``drop_at_ms`` on.

        Returns the old bucket's uid. The wait lets every node switch to the
        new bucket before the old one goes, so that nothing a lagging node
        stores meanwhile is dropped with it unseen.
        """
        async with self._turns.of(name):
            current = self.queue(name)
            record = replace(current, uid=secrets.token_hex(8))
            await self._store.meta_put(
                {f"drop/{current.uid}": b"%d" % drop_at_ms, f"q/{name}": encode_queue(record)}
            )
            self._set_queue(name, record)
            return current.uid

    # -- topics --------------------------------------------------------------

    @_change
    async def create_topic(self, name: str, settings: TopicSettings | None = None) -> None:
        """Create a topic; raise ``TopicExists`` if the name is taken."""
        validate_name("topic", name)
        settings = settings or TopicSettings()
        if not await self._store.meta_create(f"t/{name}", settings.encode()):
            raise TopicExists(name)
        self._set_topic(name, Topic(settings=settings))

    @_change
    async def configure_topic(self, name: str, settings: TopicSettings) -> None:
        """Replace a topic's settings (its subscriptions stay)."""
        self.topic(name)
        await self._store.meta_put({f"t/{name}": settings.encode()})
        self._set_topic(name, self.topic(name).with_settings(settings))

    @_change
    async def delete_topic(self, name: str) -> None:
        """Delete a topic and its subscriptions (not the queues)."""
        subscribers = self.topic(name).queues()
        await self._store.meta_delete([f"t/{name}", *(f"s/{name}/{q}" for q in subscribers)])
        self._set_topic(name, None)

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
        internal: bool = False,
    ) -> Topic:
        """Subscribe a queue to a topic, or change what it takes (a routing-key
        ``pattern``, a ``filter_policy`` on the attributes or, by ``filter_scope``,
        the body; ``strict``: only in SNS's shape) and how (``envelope``: as SNS
        notifications; to an ``endpoint``, a push subscription's queue; ``internal``:
        into an archive, the node's own); return the topic. With ``missing_ok`` the
        queue may not exist yet (SNS takes that): its copies fail until it does."""
        current = self.topic(topic)
        if endpoint is None and queue in current.subscriptions:
            endpoint = current.subscriptions[queue].endpoint  # a push subscription stays one
        if endpoint is None and not internal:
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
        # Onto the topic as it is now: changes made meanwhile (other subscriptions) stay.
        self._set_topic(topic, self.topic(topic).with_subscription(subscription), queue)
        return self.topic(topic)

    @_change
    async def unsubscribe(self, topic: str, queue: str) -> Topic:
        """Unsubscribe a queue (idempotent); return the topic."""
        self.topic(topic)
        await self._store.meta_delete([f"s/{topic}/{queue}"])
        self._set_topic(topic, self.topic(topic).without(queue), queue)
        return self.topic(topic)
