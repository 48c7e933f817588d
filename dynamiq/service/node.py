"""The node: one entry point for every message and admin verb, on one node or a cluster alike.

Every API (v1, v2, and the ones to come) parses a request, calls one method
here and renders what it returns. Whether a verb reaches the peers (receive,
delete, visibility, stats) is decided here, not by the handlers; so are the
per-request limits.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

from dynamiq.cluster.base import Membership
from dynamiq.config import LimitsSettings
from dynamiq.core.routing.filters import FilterScope
from dynamiq.core.topics import TopicPublished
from dynamiq.errors import DiskLow, Invalid, Overloaded, QueueNotFound
from dynamiq.models import (
    MAX_RETENTION_SECONDS,
    Message,
    Notice,
    Outgoing,
    Published,
    QueueRecord,
    QueueSettings,
    ReceiveRequest,
    attribute_types_size,
    attributes_size,
    check_token,
    validate_name,
)
from dynamiq.models.topics import TopicSettings
from dynamiq.service.asks import Waiting, waited
from dynamiq.service.leased import Leased
from dynamiq.service.moves import Moves
from dynamiq.service.parts import Cluster, Engine
from dynamiq.service.push.webhooks import Webhooks
from dynamiq.service.reports import (
    INTERNAL,
    NodeStats,
    QueueStatsDetail,
    QueueView,
    Status,
    Subscribers,
    SubscriptionView,
    cluster_status,
)
from dynamiq.service.stats import StatsReader
from dynamiq.storage.diskspace import DISK_RETRY_SECONDS, FreeSpace

__all__ = ["Node"]

log = logging.getLogger("dynamiq.service")


class Node:
    """Serves every verb of one node: queues, topics, messages, stats and status."""

    def __init__(
        self,
        engine: Engine,
        cluster: Cluster,
        limits: LimitsSettings,
        space: FreeSpace | None = None,
        webhooks: Webhooks | None = None,
    ) -> None:
        self._catalog = engine.catalog
        self._queues = engine.queues
        self._topics = engine.topics
        self._janitor = engine.janitor
        # Redrives and replays: what moves messages in the background.
        self.moves = Moves(engine.redriver, engine.archives, engine.queues)
        self._asks = cluster.asks
        self._majority = cluster.majority
        self._keeper = cluster.keeper
        self._reach = cluster.reach
        self.answers = cluster.answers  # what the peers' calls to this node reach
        self._membership = cluster.reach.membership
        self.space = space  # the embedded store's disk; None: the store keeps its own
        self.limits = limits
        self._waiting = 0  # receives waiting for messages now (at most limits.maxwaiting)
        self.webhooks = webhooks  # push subscriptions (None: a node that pushes nothing)
        self._stats = StatsReader(self._catalog, self._queues, self._asks, self._membership)
        engine.spreader.landed = self._copies_made

    @property
    def membership(self) -> Membership:
        """Who is in the cluster."""
        return self._membership

    async def siblings_metrics(self) -> list[bytes]:
        """Return the other workers' own metrics (those that do not answer are left out)."""
        asked = await self._reach.ask_siblings(lambda p, m: p.metrics(m))
        return [text for text in asked.values() if text is not None]

    # -- queues ----------------------------------------------------------------

    def queue_names(self) -> list[str]:
        """Return every queue, sorted (the node's own are not listed)."""
        return self._catalog.index.names_without(*INTERNAL)

    def busiest_queue_names(self) -> list[str]:
        """Return the queues in use on this node (this process), the busiest first."""
        busiest = self._queues.states.busiest(self._catalog.index.by_uid)
        return [q for q in busiest if not q.startswith(INTERNAL)]

    def require_queue(self, name: str) -> QueueRecord:
        """Return the queue, or raise ``QueueNotFound`` (before a request body is read);
        the node's own queues (a push subscription's, an archive) are no client's to name."""
        if name.startswith(INTERNAL):
            raise QueueNotFound(name)
        return self._catalog.queue(name)

    async def create_queue(self, name: str, changes: Mapping[str, Any] | None = None) -> QueueView:
        """Create a queue with default settings and ``changes`` applied."""
        settings = QueueSettings().updated(dict(changes or {}))
        self._check_delay(settings.delay_seconds, "delay_seconds")
        await self._catalog.create_queue(name, settings)
        await self._janitor.idle.changed(name)
        return await self.describe_queue(name)

    async def describe_queue(self, name: str) -> QueueView:
        """Return a queue's settings and this node's stats of it."""
        record = self._catalog.queue(name)
        stats = await self._queues.stats(name)
        return QueueView(name, record.settings, stats, self._janitor.idle.expires_at(name))

    async def configure_queue(self, name: str, changes: Mapping[str, Any]) -> QueueView:
        """Change some settings; validated, effective at once on every node."""
        if "delay_seconds" in changes:
            self._check_delay(changes["delay_seconds"], "delay_seconds")
        await self._catalog.configure_queue(name, dict(changes))
        await self._janitor.idle.changed(name)
        return await self.describe_queue(name)

    async def delete_queue(self, name: str) -> None:
        """Delete a queue now; its messages are dropped in the background."""
        expired = self._catalog.index.expires(name)
        self._queues.forget_dropped([await self._catalog.delete_queue(name)])
        await self._janitor.idle.forget(name, expired)
        self._janitor.kick()

    async def purge_queue(self, name: str) -> int:
        """Empty a queue now; return how many messages it held.

        Every message published before the call is gone at once (leases
        included: their deletes find nothing); the queue gets a new bucket and
        the old one is dropped in the background once every node has left it.
        """
        return await self._queues.purge(name, self._janitor.drop_time_ms())

    # -- topics ----------------------------------------------------------------

    def topic_names(self) -> list[str]:
        """Return every topic, sorted."""
        return self._catalog.topics()

    def require_topic(self, name: str) -> None:
        """Raise ``TopicNotFound`` unless the topic exists (before a request body is read)."""
        self._catalog.topic(name)

    def subscribers(self, topic: str) -> list[str]:
        """Return a topic's subscribed queues, or raise ``TopicNotFound``."""
        return self._catalog.topic(topic).queues()

    def subscriptions(self, topic: str) -> list[SubscriptionView]:
        """Return a topic's subscriptions by queue, or raise ``TopicNotFound``."""
        return self.subscribed(topic).page()[0]

    def subscribed(self, topic: str) -> Subscribers:
        """Return a topic's subscriptions, to be shown a page at a time, or raise
        ``TopicNotFound``."""
        return Subscribers(self._catalog.topic(topic))

    async def create_topic(self, name: str, settings: TopicSettings | None = None) -> None:
        """Create a topic."""
        await self._catalog.create_topic(name, settings)

    def topic_settings(self, name: str) -> TopicSettings:
        """Return a topic's settings, or raise ``TopicNotFound``."""
        return self._catalog.topic(name).settings

    async def configure_topic(self, name: str, settings: TopicSettings) -> None:
        """Replace a topic's settings."""
        await self._catalog.configure_topic(name, settings)

    async def delete_topic(self, name: str) -> None:
        """Delete a topic (its queues stay; its archive goes)."""
        await self.moves.archive_topic(name, None)
        await self._catalog.delete_topic(name)

    async def subscribe(
        self,
        topic: str,
        queue: str,
        pattern: str | None = None,
        filter_policy: dict[str, Any] | None = None,
        keep: bool = False,
        envelope: bool = False,
        filter_scope: FilterScope = "attributes",
        strict: bool = False,
        missing_ok: bool = False,
    ) -> Subscribers:
        """Subscribe a queue to a topic, taking what ``pattern`` and ``filter_policy``
        (on the attributes, or the body by ``filter_scope``) let through (everything
        without them), as SNS notifications with ``envelope``; return the
        subscriptions. A ``strict`` filter is held to SNS's shape (no bare values);
        ``missing_ok``: the queue may be yet to come, as SNS takes it.

        With ``keep``, a queue already subscribed keeps what it takes.
        """
        if keep and queue in self._catalog.topic(topic).subscriptions:
            return self.subscribed(topic)
        changed = await self._catalog.subscribe(
            topic,
            queue,
            pattern,
            filter_policy,
            envelope,
            filter_scope,
            strict,
            missing_ok=missing_ok,
        )
        return Subscribers(changed)

    async def unsubscribe(self, topic: str, queue: str) -> Subscribers:
        """Unsubscribe a queue (idempotent); return the remaining subscriptions."""
        validate_name("queue", queue, "queue")
        return Subscribers(await self._catalog.unsubscribe(topic, queue))

    # -- messages --------------------------------------------------------------

    async def publish(self, queue: str, messages: Sequence[bytes | Outgoing]) -> Published[int]:
        """Store messages durably; return their ids in order (and which were duplicates)."""
        self._check_outgoing(messages, self._catalog.queue(queue).settings)
        self._check_space()
        self._janitor.idle.used((queue,))
        ids = await self._queues.publish(queue, messages)
        await self._asks.published({queue: ids}, messages)
        return ids

    async def publish_topic(
        self,
        topic: str,
        messages: Sequence[bytes | Outgoing],
        notices: Sequence[Notice] | None = None,
    ) -> TopicPublished:
        """Store a copy of each message in every subscribed queue that takes it; return,
        per queue of a client's that took any, its copies' ids in request order (None:
        not taken) and which were duplicates.

        A message without a delay of its own gets each queue's ``delay_seconds``;
        ``notices`` name the messages in SNS notifications.
        """
        self._check_outgoing(messages)
        self._check_space()
        published = await self._topics.publish(topic, messages, notices)
        self._janitor.idle.used(published.ids)
        await self._asks.published(published.stored_now(), messages)
        # A push subscription's queue is the node's own: no client's to be told of.
        return published.for_clients()

    async def _copies_made(self, placed: Mapping[str, Sequence[int | None]]) -> None:
        """Tell the other workers and members of a wide fan-out's copies made behind its
        answer, as a publish tells them of its messages."""
        await self._asks.published(placed, ())

    async def receive(self, ask: ReceiveRequest, wait: Waiting = waited) -> Leased:
        """Lease up to ``max_messages``, from any node's slice, waiting up to ``wait_seconds``.

        What is visible now is leased at once. A receive that has to wait runs
        through ``wait`` (the HTTP layer stops it when its client goes).

        Raises:
            Overloaded: it would wait, and ``limits.maxwaiting`` receives wait already.
        """
        self.check_receive(ask)
        self._janitor.idle.used((ask.queue,))
        epoch = self._majority.epoch()
        messages = await self._asks.receive(ask, lambda waiting: self._one_of_many(waiting, wait))
        return Leased(messages, lambda: self._majority.holds(epoch))

    async def _one_of_many(
        self, receive: Coroutine[Any, Any, list[Message]], wait: Waiting
    ) -> list[Message]:
        """Run a receive that waits through ``wait``, as one of ``limits.maxwaiting`` at most."""
        if self._waiting >= self.limits.maxwaiting:
            receive.close()  # never started
            raise Overloaded(
                f"{self._waiting} receives wait on this node already (limits.maxwaiting); "
                "try again, or another node"
            )
        self._waiting += 1
        try:
            return await wait(receive)
        finally:
            self._waiting -= 1

    async def receive_here(
        self, queue: str, max_messages: int, visibility_timeout: float | None, waiter: str
    ) -> Leased:
        """Lease from this node's own slice only, without waiting (a peer asks)."""
        epoch = self._majority.epoch()
        got = await self.answers.receive_here(queue, max_messages, visibility_timeout, waiter)
        return Leased(got, lambda: self._majority.holds(epoch))

    def message_limit(self, queue: QueueSettings) -> int:
        """The most bytes (body and attributes) one message of a queue may have."""
        own = queue.max_message_bytes
        most = self.limits.maxmessagebytes
        return most if own is None else min(own, most)

    def wait_of(self, queue: str, asked: float | None) -> float:
        """How long a receive waits: what it asked, else its queue's ``receive_wait_seconds``
        (at most this node's ``limits.maxwaitseconds``)."""
        if asked is not None:
            return asked
        return min(
            self._catalog.queue(queue).settings.receive_wait_seconds, self.limits.maxwaitseconds
        )

    def _check_space(self) -> None:
        """Raise ``DiskLow`` while the store's disk is below ``limits.diskfreelimit``."""
        if self.space is not None and self.space.low:
            room = self.space.last_room or 0
            raise DiskLow(
                f"{room >> 20} MiB of room for the store on the data directory's disk, below "
                f"limits.diskfreelimit ({self.space.limit >> 20} MiB): publishes wait "
                "until consumers make room",
                retry_after=DISK_RETRY_SECONDS,
            )

    def check_receive(self, ask: ReceiveRequest) -> None:
        """Raise ``Invalid`` for a batch or a wait beyond this node's limits."""
        self._check_batch(ask.max_messages)
        if ask.wait_seconds > self.limits.maxwaitseconds:
            raise Invalid(f"wait_seconds must be <= {self.limits.maxwaitseconds:g}", "wait_seconds")

    async def give_back(self, queue: str, messages: Sequence[Message]) -> None:
        """End the leases of messages that never reached their consumer."""
        if messages:
            await self._asks.change_visibility(queue, [m.id for m in messages], 0.0)
            log.debug("gave back %d messages of %s: the consumer was gone", len(messages), queue)

    def dead_letter_sources(self, queue: str) -> list[str]:
        """Return the queues whose dead-letter queue is ``queue``, sorted."""
        self._catalog.queue(queue)
        return self._catalog.dead_letter_users(queue)

    async def delete(self, queue: str, ids: Sequence[int]) -> list[bool]:
        """Delete messages by id, from any node; per id, whether it existed."""
        self._check_batch(len(ids))
        return await self._asks.delete(queue, ids)

    async def delete_delivered(
        self, queue: str, deliveries: Sequence[tuple[int, int]]
    ) -> list[int]:
        """Delete messages as one delivery of each names them, ``(id, receive count)``:
        one received again since is left alone. Return the ids that were current.

        The check and the delete are two steps: a receive between them (the
        lease lapsed just then) can lose its message to the older delivery.
        """
        self._check_batch(len(deliveries))
        current = await self._asks.still_current(queue, deliveries)
        if current:
            await self._asks.delete(queue, current)
        return current

    async def change_visibility(self, queue: str, ids: Sequence[int], seconds: float) -> list[int]:
        """Extend leases by ``seconds`` from now, or end them (0); return the ids leased."""
        self._check_batch(len(ids))
        return await self._asks.change_visibility(queue, ids, seconds)

    async def peek(self, queue: str, message_id: int) -> Message:
        """Return a message without leasing it, or raise ``MessageNotFound``."""
        return await self._queues.peek(queue, message_id)

    async def peek_many(self, queue: str, count: int) -> list[Message]:
        """Return up to ``count`` of the oldest messages without leasing them."""
        if not 1 <= count <= self.limits.maxbatch:
            raise Invalid(f"max must be an integer from 1 to {self.limits.maxbatch}", field="max")
        return await self._queues.peek_many(queue, count)

    # -- stats and status ----------------------------------------------------

    async def queue_stats(self, names: Sequence[str]) -> list[QueueStatsDetail]:
        """Return each queue's stats cluster-wide: every live node's leases and rates summed."""
        return await self._stats.queues(names)

    async def node_stats(
        self, names: Sequence[str], after: str | None = None, every: bool = True
    ) -> NodeStats:
        """Return the cluster-wide stats of the queues ``names`` (a page of them, ``after``
        the name the next page starts after) and their sums (``every``: over every queue,
        where the store counts them)."""
        return await self._stats.page(names, after, every)

    async def status(self) -> Status:
        """Return this node, what it serves now, and every node it heard of."""
        return cluster_status(self._membership, await self._keeper.workers_serving())

    # -- lifecycle -------------------------------------------------------------

    async def stop_serving(self) -> None:
        """Answer waiting receives now and hand this node's slice to the others (shutdown)."""
        self._queues.close()
        await self._keeper.leave()

    def _check_outgoing(
        self, messages: Sequence[bytes | Outgoing], queue: QueueSettings | None = None
    ) -> None:
        """Check a publish's messages against this node's limits and, published to one
        queue, that queue's (its ``max_message_bytes``, a ``fifo`` queue's groups)."""
        self._check_batch(len(messages))
        most = self.limits.maxmessagebytes
        limit = most if queue is None else self.message_limit(queue)
        what = "limits.maxmessagebytes" if limit == most else "the queue's max_message_bytes"
        fifo = queue is not None and queue.fifo
        for m in messages:
            body, extras = (m, None) if isinstance(m, bytes) else (m.body, m)
            size = len(body)
            if extras is not None:
                size += attributes_size(extras.attributes)
                size += attribute_types_size(extras.attributes, extras.attribute_types)
            if size > limit:
                raise Invalid(
                    f"a message's body and attributes are larger than {what}", "attributes"
                )
            if fifo and (extras is None or extras.group is None):
                raise Invalid("a fifo queue takes only messages with a group", "group")
            if extras is not None:
                self._check_extras(extras)

    def _check_extras(self, m: Outgoing) -> None:
        if m.delay_seconds is not None:
            self._check_delay(m.delay_seconds, "delay_seconds")
        if m.ttl_seconds is not None and not 0 < m.ttl_seconds <= MAX_RETENTION_SECONDS:
            raise Invalid(
                f"ttl_seconds must be > 0 and <= {MAX_RETENTION_SECONDS:g}", "ttl_seconds"
            )
        if m.dedup_id is not None:
            check_token("dedup_id", m.dedup_id)
        if m.group is not None:
            check_token("group", m.group)
        if m.tenant is not None:
            check_token("tenant", m.tenant)

    def _check_delay(self, seconds: object, field: str) -> None:
        limit = self.limits.maxdelayseconds
        if isinstance(seconds, int | float) and not 0 <= seconds <= limit:
            raise Invalid(f"{field} must be >= 0 and <= {limit:g} (limits.maxdelayseconds)", field)

    def _check_batch(self, size: int) -> None:
        if size > self.limits.maxbatch:
            raise Invalid(f"at most {self.limits.maxbatch} messages per request", field="batch")
