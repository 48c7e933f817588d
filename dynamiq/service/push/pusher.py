"""Deliveries to HTTP/S endpoints: each process of a node POSTs what its own slice of
every push subscription's queue holds.

A copy is leased for the delivery (``push.timeout``, the longest a request
may take, and ``LEASE_MARGIN_SECONDS``); its receive count is the attempt.
A 2xx deletes it. A failure that may pass (no answer in time, a refused connection, 5xx, 429, 408,
anything outside 2xx-4xx) is retried after the delay the delivery policy
gives that attempt, by making the copy visible again then; one the endpoint
refuses for good (another 4xx), or the last retry's failure, goes to the
subscription's dead-letter queue (as the SNS document), or is dropped
without one, counted either way. A node that dies mid-delivery leaves the
lease to lapse: whoever serves the slice then tries again (at least once).

At most ``push.concurrency`` deliveries of a subscription are in flight per
process, and as many again are leased meanwhile, ready for the next free slot
(no slot waits for a receive); no more are leased than that: 10,000 pending
copies of a slow endpoint stay in the store, not in memory. A ready copy whose
wait took much of its lease has it made longer before it goes.
``throttlePolicy`` bounds the deliveries each process starts per second.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import Clock
from dynamiq.core.push.documents import PushEndpoint, subscription_id
from dynamiq.core.queues import QueueService
from dynamiq.core.routing.subscriptions import Subscription
from dynamiq.errors import DynamiqError, TopicNotFound
from dynamiq.metrics.base import Metrics
from dynamiq.models import Message, Outgoing
from dynamiq.models.topics import TopicSettings
from dynamiq.push.endpoints import Unreachable
from dynamiq.push.policy import DeliveryRules, delivery_rules
from dynamiq.push.request import Request
from dynamiq.service.majority import Majority
from dynamiq.service.push.webhooks import Webhooks

__all__ = ["Poster", "Pusher", "outcome"]

log = logging.getLogger("dynamiq.service")

LEASE_MARGIN_SECONDS = 5.0  # a delivery's lease: push.timeout and this, to delete it
WAIT_SECONDS = 5.0  # a subscription's receive waits this long for a publish
SIGNING_THREADS = 2
IDLE_SECONDS = 0.1  # after a receive that found nothing
SYNC_SECONDS = 1.0  # how often the subscriptions served are brought up to date
TIDY_EVERY = 60  # syncs between two tidyings (expired and orphaned subscriptions)


class Poster(Protocol):
    """POSTs a request; the endpoint's status, or ``Unreachable``."""

    async def post(self, request: Request) -> int: ...


def outcome(status: int | None) -> str:
    """What an answer means: ``delivered`` (2xx), ``retry`` (no answer, 5xx, 429, 408,
    1xx, 3xx: anything outside 2xx-4xx, and 4xx that say "later") or ``refused`` (any
    other 4xx: the endpoint will not take it)."""
    if status is None:
        return "retry"
    if 200 <= status < 300:
        return "delivered"
    if 400 <= status < 500 and status not in (408, 429):
        return "refused"
    return "retry"


class _Deletes:
    """Delivered copies of one subscription, deleted together: each store write takes
    every id delivered since the one before, so a delivery's slot is free again
    once its endpoint answered, not once its delete was fsynced. A copy whose
    delete is lost (the node dies first) keeps its lease until it lapses, and is
    delivered again: at least once."""

    def __init__(self, queue: str, delete: Callable[[str, list[int]], Awaitable[object]]) -> None:
        self._queue = queue
        self._delete = delete
        self._ids: list[int] = []
        self._task: asyncio.Task[None] | None = None

    def add(self, message_id: int) -> None:
        self._ids.append(message_id)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        while self._ids:
            ids, self._ids = self._ids, []
            try:
                await self._delete(self._queue, ids)
            except DynamiqError as exc:  # their leases lapse: delivered again
                log.warning("push subscription %s: %s", subscription_id(self._queue), exc)

    async def close(self) -> None:
        """Wait for the deletes under way."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


@dataclass(frozen=True, slots=True)
class _Ready:
    """A copy leased for delivery, waiting for a free slot."""

    message: Message
    epoch: int  # the majority's, when it was leased: void if that ended
    leased_at: float  # the clock's seconds (``Clock.now``)
    request: Request | None  # made (signed) already, or to be made when sent
    made_for: Subscription  # the subscription as it was when ``request`` was made


@dataclass
class _Served:
    """One subscription as this process serves it."""

    topic: str
    subscription: Subscription
    settings: TopicSettings  # its topic's, which its rules were made of
    rules: DeliveryRules
    version: str  # the topic's SignatureVersion
    deletes: _Deletes
    task: asyncio.Task[None] | None = None
    in_flight: set[asyncio.Task[None]] = field(default_factory=set)
    tokens: float = 0.0
    refilled: float = field(default_factory=time.monotonic)

    @property
    def endpoint(self) -> PushEndpoint:
        """The endpoint pushed to (only subscriptions with one are served here)."""
        endpoint = self.subscription.endpoint
        assert endpoint is not None
        return endpoint


class Pusher:
    """Delivers this process's share of every push subscription."""

    def __init__(
        self,
        webhooks: Webhooks,
        catalog: Catalog,
        queues: QueueService,
        majority: Majority,
        poster: Poster,
        publish: Callable[[str, list[bytes | Outgoing]], Awaitable[object]],
        clock: Clock,
        metrics: Metrics,
        concurrency: int,
        timeout: float,
    ) -> None:
        self._webhooks = webhooks
        self._catalog = catalog
        self._queues = queues
        self._majority = majority
        self._poster = poster
        self._publish = publish  # into a dead-letter queue, its consumers told
        self._clock = clock
        self._metrics = metrics
        self._concurrency = concurrency
        self._lease = timeout + LEASE_MARGIN_SECONDS
        # RSA signing lets go of the GIL: the loop goes on while the other core signs.
        self._signer = ThreadPoolExecutor(SIGNING_THREADS, thread_name_prefix="push-sign")
        self._served: dict[str, _Served] = {}

    async def pusher_loop(self) -> None:
        """Serve the push subscriptions there are, until cancelled."""
        syncs = 0
        try:
            while True:
                self._sync()
                syncs += 1
                if syncs % TIDY_EVERY == 1:
                    await self._tidy()
                await asyncio.sleep(SYNC_SECONDS)
        finally:
            await self._stop_all()

    async def _tidy(self) -> None:
        try:
            await self._webhooks.reload_keys()  # rotated through another node
            await self._webhooks.tidy(self._clock.wall_ms())
        except DynamiqError as exc:
            log.warning("push subscriptions not tidied: %s", exc)

    def _sync(self) -> None:
        """Serve every push subscription now held, and no other; follow their changes."""
        wanted = {s.queue: (topic, s) for topic, s in self._catalog.pushes()}
        for queue in set(self._served) - set(wanted):
            served = self._served.pop(queue)
            if served.task is not None:
                served.task.cancel()
        for queue, (topic, subscription) in wanted.items():
            known = self._served.get(queue)
            settings = self._catalog.topic(topic).settings
            if known is not None and (known.subscription, known.settings) == (
                subscription,
                settings,
            ):
                continue  # unchanged: its rules stand
            version = (settings.sns_attributes or {}).get("SignatureVersion", "1")
            rules = _rules(settings, subscription)
            if known is None:
                deletes = _Deletes(queue, self._queues.delete)
                served = _Served(topic, subscription, settings, rules, version, deletes)
                self._served[queue] = served
                served.task = asyncio.create_task(self._serve(queue, served))
            else:
                known.subscription, known.settings = subscription, settings
                known.rules, known.version = rules, version

    async def _stop_all(self) -> None:
        tasks = [s.task for s in self._served.values() if s.task is not None]
        tasks += [t for s in self._served.values() for t in s.in_flight]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for served in self._served.values():
            await served.deletes.close()
        self._served.clear()
        self._signer.shutdown(wait=False)

    async def _serve(self, queue: str, served: _Served) -> None:
        """Deliver what this process's slice of ``queue`` holds, until cancelled: as
        many at once as ``push.concurrency``, the next ones leased meanwhile."""
        ready: asyncio.Queue[_Ready] = asyncio.Queue()
        room = asyncio.Semaphore(self._concurrency)  # deliveries in flight
        leases = asyncio.Semaphore(2 * self._concurrency)  # in flight, and ready
        fetcher = asyncio.create_task(self._fetch(queue, served, ready, leases))
        try:
            while True:
                copy = await ready.get()
                await room.acquire()
                task = asyncio.create_task(self._start(queue, served, copy, room, leases))
                served.in_flight.add(task)
                task.add_done_callback(served.in_flight.discard)
        finally:
            fetcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await fetcher

    async def _fetch(
        self,
        queue: str,
        served: _Served,
        ready: asyncio.Queue[_Ready],
        leases: asyncio.Semaphore,
    ) -> None:
        """Lease copies while deliveries are under way, within the throttle: as many
        as the deliveries in flight and ready leave room for."""
        while True:
            held = 0  # lease slots taken for this round, not handed on yet
            try:
                if not self._majority.may_serve():
                    await asyncio.sleep(0.5)
                    continue
                await leases.acquire()  # one at least; then every one free now
                held = 1
                while not leases.locked():
                    await leases.acquire()
                    held += 1
                want = await self._throttled(served, held)
                for _ in range(held - want):
                    leases.release()
                held = want
                epoch = self._majority.epoch()
                leased_at = self._clock.now()
                got = await self._queues.receive(queue, want, self._lease, WAIT_SECONDS)
                if not got:  # the wait ended early (closing, or no slice served yet)
                    await asyncio.sleep(IDLE_SECONDS)
                signed = await self._signed(queue, served, got)
                for message, request in zip(got, signed, strict=True):
                    copy = _Ready(message, epoch, leased_at, request, served.subscription)
                    ready.put_nowait(copy)
                    held -= 1
            except asyncio.CancelledError:
                raise
            except DynamiqError as exc:
                log.warning("push subscription %s: %s", subscription_id(queue), exc)
                await asyncio.sleep(1.0)
            except Exception:  # a bug must not stop the subscription: its leases lapse
                log.exception("push subscription %s", subscription_id(queue))
                await asyncio.sleep(1.0)
            finally:
                for _ in range(held):
                    leases.release()

    async def _signed(
        self, queue: str, served: _Served, messages: list[Message]
    ) -> list[Request | None]:
        """The signed requests of ``messages`` (None for a raw endpoint's: made when
        sent), made on the signing threads in as many runs as there are threads
        (a hop to a thread and back per message costs as much as its JSON)."""
        self._refresh(queue, served)
        endpoint = served.subscription.endpoint
        if not messages or endpoint is None or endpoint.raw:
            return [None] * len(messages)
        make = self._maker(queue, served)

        def run(bodies: list[bytes]) -> list[Request]:
            return [make(body) for body in bodies]

        loop = asyncio.get_running_loop()
        size = -(-len(messages) // SIGNING_THREADS)
        runs = [[m.body for m in messages[i : i + size]] for i in range(0, len(messages), size)]
        made = await asyncio.gather(*(loop.run_in_executor(self._signer, run, r) for r in runs))
        return [request for part in made for request in part]

    def _maker(self, queue: str, served: _Served) -> Callable[[bytes], Request]:
        """How a stored copy becomes its request, for the subscription as it is now."""
        endpoint = served.endpoint
        return functools.partial(
            self._webhooks.documents.request,
            endpoint=endpoint,
            subscription_arn=self._webhooks.subscription_arn(served.topic, queue),
            version=served.version,
            content_type=served.rules.content_type,
        )

    async def _start(
        self,
        queue: str,
        served: _Served,
        copy: _Ready,
        room: asyncio.Semaphore,
        leases: asyncio.Semaphore,
    ) -> None:
        """Deliver a copy that was ready (its lease made longer first when the wait for
        a free slot took so much of it that the delivery might outlast it)."""
        try:
            if not self._majority.holds(copy.epoch):
                return  # paused since it was leased: the lease is void, it lapses
            left = copy.leased_at + self._lease - self._clock.now()
            if left < self._lease - LEASE_MARGIN_SECONDS / 2:
                message = copy.message
                if not await self._queues.change_visibility(queue, [message.id], self._lease):
                    return  # its lease ended meanwhile: whoever leases it next delivers it
            self._refresh(queue, served)
            # Made for the subscription as it was: as it is now, if it changed since.
            made = copy.request if copy.made_for is served.subscription else None
            await self._attempt(queue, served, copy.message, made)
        except DynamiqError as exc:  # the store: the lease lapses, the copy is tried again
            log.warning("push subscription %s: %s", subscription_id(queue), exc)
        finally:
            room.release()
            leases.release()

    def _refresh(self, queue: str, served: _Served) -> None:
        """Follow a change of the subscription made since the last sync (its endpoint's
        raw bodies, policy, dead-letter queue): a delivery goes out as it is now."""
        try:
            current = self._catalog.topic(served.topic).subscriptions.get(queue)
        except TopicNotFound:
            return
        if current is not None and current is not served.subscription:
            settings = self._catalog.topic(served.topic).settings
            served.subscription, served.settings = current, settings
            served.rules = _rules(settings, current)

    async def _throttled(self, served: _Served, room: int) -> int:
        """How many of ``room`` deliveries may start now under the subscription's
        ``maxReceivesPerSecond`` (at least one: waits for it)."""
        rate = served.rules.max_per_second
        if rate is None:
            return room
        while True:
            now = time.monotonic()
            served.tokens = min(float(rate), served.tokens + (now - served.refilled) * rate)
            served.refilled = now
            if served.tokens >= 1:
                take = min(room, int(served.tokens))
                served.tokens -= take
                return take
            await asyncio.sleep((1 - served.tokens) / rate)

    async def _attempt(
        self, queue: str, served: _Served, message: Message, request: Request | None
    ) -> None:
        """Deliver ``message`` (as ``request``, when it was made already)."""
        endpoint = served.endpoint
        topic = served.topic
        if request is None:
            make = self._maker(queue, served)
            # A raw body is made here (a thread hop would cost more); a document is signed
            # on a thread (but for a raw endpoint's confirmation, signed here once).
            if endpoint.raw:
                request = make(message.body)
            else:
                loop = asyncio.get_running_loop()
                request = await loop.run_in_executor(self._signer, make, message.body)
        started = time.perf_counter()
        try:
            status: int | None = await self._poster.post(request)
        except Unreachable as exc:
            log.debug("%s did not answer: %s", endpoint.url, exc)
            status = None
        took = time.perf_counter() - started
        self._metrics.push_attempt(str(subscription_id(queue)), took, len(served.in_flight) - 1)
        verdict = outcome(status)
        if verdict == "delivered":
            self._webhooks.delivered(queue, True)
            served.deletes.add(message.id)
            if request.notification:  # a confirmation is no message delivered
                self._metrics.topic_event(topic, "delivered", 1)
            return
        delays = served.rules.retry.delays()
        retried = message.receive_count - 1  # attempts so far, less the first
        if verdict == "retry" and retried < len(delays):
            await self._queues.change_visibility(queue, [message.id], delays[retried])
        else:
            await self._give_up(queue, served, message, status)
        # Counted once the copy's next step is stored: who reads the count sees it.
        self._webhooks.delivered(queue, False)
        self._metrics.topic_event(topic, "failed", 1)

    async def _give_up(
        self, queue: str, served: _Served, message: Message, status: int | None
    ) -> None:
        """Move a copy that will not be delivered to the dead-letter queue (or drop it)."""
        endpoint = served.endpoint
        target = endpoint.dead_letter
        said = "no answer" if status is None else f"status {status}"
        if target is not None and self._catalog.find(target) is not None:
            await self._publish(target, [message.body])
            self._metrics.topic_event(served.topic, "redriven_to_dlq", 1)
            log.info("%s: given up (%s), moved to %s", endpoint.url, said, target)
        else:
            log.warning("%s: given up (%s), dropped: no dead-letter queue", endpoint.url, said)
        await self._queues.delete(queue, [message.id])


def _rules(settings: TopicSettings, subscription: Subscription) -> DeliveryRules:
    """The delivery rules of ``subscription`` under its topic's ``settings``."""
    kept = settings.sns_attributes or {}
    topic_doc = json.loads(kept["DeliveryPolicy"]) if "DeliveryPolicy" in kept else {}
    endpoint = subscription.endpoint
    own = json.loads(endpoint.delivery_policy) if endpoint and endpoint.delivery_policy else {}
    return delivery_rules(topic_doc, own)
