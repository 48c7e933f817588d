"""Push subscriptions (webhooks): made, confirmed, changed and removed.

A push subscription is a subscription of the topic whose queue is its own
(``core.routing.push``); this part makes both, and puts the
``SubscriptionConfirmation`` first in the queue, so the endpoint is asked to
confirm as durably as it will be sent messages. Until it confirms (by
fetching its ``SubscribeURL``, or through ``ConfirmSubscription``) the
subscription takes no message; unconfirmed, it goes after three days, as in
SNS. Deliveries are the ``Pusher``'s.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from typing import Any

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import Clock
from dynamiq.core.push.documents import (
    PUSH_PREFIX,
    Documents,
    PushEndpoint,
    confirmation,
    push_queue,
    subscription_id,
)
from dynamiq.core.push.signing import SigningKey, rotate_signing_key, signing_keys
from dynamiq.core.queues import QueueService
from dynamiq.core.routing.filters import FilterScope
from dynamiq.core.routing.notifications import Address, sns_timestamp
from dynamiq.core.routing.subscriptions import Subscription
from dynamiq.errors import BackendUnavailable, Invalid, NotFound, QueueNotFound, TopicNotFound
from dynamiq.models import Notice, QueueSettings, topic_arn
from dynamiq.push.endpoints import EndpointRules
from dynamiq.push.policy import subscription_policy
from dynamiq.service.reports import PushView, SubscriptionView
from dynamiq.storage.base import StorageBackend

__all__ = ["PENDING_DAYS", "Webhooks"]

log = logging.getLogger("dynamiq.service")

PENDING_DAYS = 3  # an unconfirmed subscription goes after this long (SNS's)
# A push queue's settings: its lease is the Pusher's, its retention the longest a
# delivery may be retried (an hour) with room for a stopped cluster to come back.
PUSH_QUEUE = QueueSettings(retention_seconds=14 * 86400.0)


class Webhooks:
    """The push subscriptions of the cluster, held to this node's ``rules``; ``base``
    is the URL endpoints reach the cluster at."""

    def __init__(
        self,
        catalog: Catalog,
        queues: QueueService,
        store: StorageBackend,
        rules: EndpointRules,
        clock: Clock,
        base: str,
        region: str,
        account: str,
        address: Address | None = None,
    ) -> None:
        """``address``: where a topic lives (its account and name there; ``account``
        and its full name by default)."""
        self._catalog = catalog
        self._queues = queues
        self._store = store
        self._clock = clock
        self.rules = rules
        self.base = base
        self._region = region
        self._address: Address = address or (lambda topic: (account, topic))
        self._documents: Documents | None = None
        self._previous: SigningKey | None = None  # rotated out: its certificate stays served
        self._failing: set[str] = set()  # subscriptions whose last delivery here failed

    def delivered(self, queue: str, ok: bool) -> None:
        """Note how a delivery of a push subscription's queue went (this process's)."""
        if ok:
            self._failing.discard(queue)
        else:
            self._failing.add(queue)

    def state(self, push: PushView) -> str:
        """A push subscription's state: pending, confirmed, or failing (its last
        delivery from this process failed)."""
        if push.state == "confirmed" and push_queue(push.id) in self._failing:
            return "failing"
        return push.state

    async def start(self) -> None:
        """Read the cluster's signing key (made by the first node to start)."""
        await self.reload_keys()

    async def reload_keys(self) -> None:
        """Sign with the key the store holds now (another node may have rotated it)."""
        key, self._previous = await signing_keys(self._store)
        if self._documents is None or self._documents.key.key_id != key.key_id:
            self._documents = Documents(self.base, key)

    async def rotate_key(self) -> str:
        """Make the cluster a new signing key; return its id. This node signs with it at
        once, the others within a minute; the old certificate stays served."""
        await rotate_signing_key(self._store)
        await self.reload_keys()
        return self.documents.key.key_id

    def certificate(self, key_id: str) -> bytes | None:
        """The certificate (PEM) of the current key or the one before, by id."""
        keys = [k for k in (self._documents and self._documents.key, self._previous) if k]
        return next((k.cert_pem for k in keys if k.key_id == key_id), None)

    @property
    def documents(self) -> Documents:
        """The documents endpoints get (``BackendUnavailable`` until started)."""
        if self._documents is None:
            raise BackendUnavailable("the signing key has not been read yet", retry_after=1)
        return self._documents

    def topic_arn(self, topic: str) -> str:
        return topic_arn(self._region, *self._address(topic))

    def subscription_arn(self, topic: str, queue: str) -> str:
        return f"{self.topic_arn(topic)}:{subscription_id(queue)}"

    # -- making and confirming ---------------------------------------------------

    async def subscribe(
        self,
        topic: str,
        protocol: str,
        url: str,
        filter_policy: object = None,
        filter_scope: FilterScope = "attributes",
        raw: bool = False,
        delivery_policy: str | None = None,
        dead_letter: str | None = None,
        strict: bool = False,
    ) -> SubscriptionView:
        """Subscribe an endpoint to a topic (the same endpoint twice: the same
        subscription, asked to confirm again while it has not); return it.

        Raises:
            Invalid: an endpoint the rules refuse, a FIFO topic (its order
                cannot hold over HTTP), a bad filter, delivery policy or
                dead-letter queue.
        """
        subscribed = self._catalog.topic(topic)
        if topic.endswith(".fifo"):
            raise Invalid("a FIFO topic delivers only to SQS queues", "Protocol")
        parts = await self.rules.check(url)
        if parts.scheme != protocol:
            raise Invalid(f"an {protocol} subscription needs an {protocol} URL", "Endpoint")
        self._check_policy(delivery_policy, dead_letter)
        for s in subscribed.subscriptions.values():
            if s.endpoint is not None and (s.endpoint.protocol, s.endpoint.url) == (protocol, url):
                if not s.endpoint.confirmed:
                    await self._ask_to_confirm(topic, s.queue, s.endpoint)
                return SubscriptionView.of(s)
        queue = push_queue()
        # The filter checked before anything is made: a refusal leaves nothing behind.
        Subscription.parse(queue, None, filter_policy, True, filter_scope, lenient=not strict)
        endpoint = PushEndpoint.new(protocol, url, self._clock.wall_ms())
        endpoint = replace(
            endpoint, raw=raw, delivery_policy=delivery_policy, dead_letter=dead_letter
        )
        await self._catalog.create_queue(queue, PUSH_QUEUE, internal=True)
        changed = await self._catalog.subscribe(
            topic, queue, None, filter_policy, True, filter_scope, strict, endpoint
        )
        await self._ask_to_confirm(topic, queue, endpoint)
        return SubscriptionView.of(changed.subscriptions[queue])

    async def _ask_to_confirm(self, topic: str, queue: str, endpoint: PushEndpoint) -> None:
        document = confirmation(
            self.topic_arn(topic), endpoint, Notice.new().message_id, self._now()
        )
        await self._queues.publish(queue, [document])

    def _now(self) -> str:
        return sns_timestamp(self._clock.wall_ms())

    async def confirm(self, topic: str, token: str) -> SubscriptionView:
        """Confirm the subscription ``token`` was sent to (again: no change); return it.

        Raises:
            TopicNotFound: no such topic.
            Invalid: no subscription of the topic was sent this token.
        """
        for s in self._catalog.topic(topic).subscriptions.values():
            if s.endpoint is not None and s.endpoint.token == token:
                if not s.endpoint.confirmed:
                    log.info("%s confirmed its subscription to %s", s.endpoint.url, topic)
                    s = await self._replace(topic, s, s.endpoint.confirm())
                return SubscriptionView.of(s)
        raise Invalid("no subscription of this topic was sent this token", "Token")

    # -- changing and removing ---------------------------------------------------

    def find(self, subscription: str) -> tuple[str, Subscription]:
        """The topic and push subscription of this id (``NotFound`` otherwise)."""
        found = self._catalog.push(subscription)
        if found is None:
            raise NotFound("Subscription does not exist")
        return found

    async def configure(self, subscription: str, **changes: Any) -> SubscriptionView:
        """Change a push subscription's ``raw``, ``delivery_policy`` or ``dead_letter``."""
        topic, found = self.find(subscription)
        assert found.endpoint is not None
        endpoint = replace(found.endpoint, **changes)
        self._check_policy(endpoint.delivery_policy, endpoint.dead_letter)
        return SubscriptionView.of(await self._replace(topic, found, endpoint))

    async def unsubscribe(self, subscription: str) -> None:
        """Remove a push subscription and what it had still to deliver (idempotent)."""
        found = self._catalog.push(subscription)
        if found is not None:
            await self._drop(found[1].queue)

    async def tidy(self, now_ms: int, settled_ms: int = 60_000) -> None:
        """Remove what should not be kept: subscriptions still unconfirmed after
        ``PENDING_DAYS``, and push queues no subscription holds (their topic was
        deleted) older than ``settled_ms`` (a subscription is made just after its
        queue)."""
        held = set()
        for topic, s in self._catalog.pushes():
            held.add(s.queue)
            assert s.endpoint is not None
            if (
                not s.endpoint.confirmed
                and now_ms - s.endpoint.created_ms > PENDING_DAYS * 86_400_000
            ):
                log.info(
                    "%s never confirmed its subscription to %s: removed", s.endpoint.url, topic
                )
                await self._drop(s.queue)
        index = self._catalog.index
        for name in list(index.names_from(prefix=PUSH_PREFIX)):
            record = index.get(name)
            if record and name not in held and now_ms - record.created_ms > settled_ms:
                await self._drop(name)

    async def _drop(self, queue: str) -> None:
        with contextlib.suppress(QueueNotFound, TopicNotFound):  # another node did
            await self._catalog.delete_queue(queue)

    async def _replace(self, topic: str, s: Subscription, endpoint: PushEndpoint) -> Subscription:
        policy = s.filter
        changed = await self._catalog.subscribe(
            topic,
            s.queue,
            s.pattern,
            None if policy is None else policy.spec,
            s.envelope,
            "attributes" if policy is None else policy.scope,
            endpoint=endpoint,
        )
        return changed.subscriptions[s.queue]

    def _check_policy(self, delivery_policy: str | None, dead_letter: str | None) -> None:
        if delivery_policy is not None:
            subscription_policy(delivery_policy)
        if dead_letter is not None:
            record = self._catalog.find(dead_letter)
            if record is None or dead_letter.startswith(PUSH_PREFIX):
                raise Invalid(f"dead-letter queue {dead_letter!r} does not exist", "RedrivePolicy")
