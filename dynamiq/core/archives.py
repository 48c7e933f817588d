"""A FIFO topic's archive, and its replays into a subscription (SNS's ``ArchivePolicy``
and ``ReplayPolicy``).

The archive is a queue of the node's own (``archive~<topic>``: no API names
it, no listing shows it) subscribed to the topic with envelopes, so a publish
stores its copy there in the same commit as the others, as the notification
(``notifications``): what a replay needs is in it (``MessageId``,
``Timestamp``, ``Subject``, the message and its attributes) and on it (its
group). Its retention is the policy's days; nothing receives from it.

A replay is a task stored as a redrive's is (``replay/<topic>/<queue>``, and
its progress in ``replay-progress/...``), run by the node that started it and resumed by it after
a restart (``lifecycle.tasks``). It walks the archive stripe by stripe over
the keys of its time range (ids are time-ordered within a stripe, and each
message group keeps to one: every group's order is kept) and stores each
message the subscription takes into its queue, marked ``Replayed``, or bare
for a raw delivery. A copy's deduplication id is made of the task's and the
message's: a replay resumed after a crash stores nothing its queue already
took from it (within the queue's deduplication window), a new replay
delivers everything again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import secrets
from typing import Literal

import msgspec

from dynamiq.core.ids import EPOCH_US, SEQ_MASK, stripe_of, stripe_range
from dynamiq.core.lifecycle.tasks import Runners
from dynamiq.core.queues import QueueService
from dynamiq.core.records import message
from dynamiq.core.routing.filters import Subject
from dynamiq.core.routing.notifications import replayed, unwrapped
from dynamiq.core.routing.subscriptions import ARCHIVE_PREFIX, Subscription, archive_queue
from dynamiq.errors import Invalid, QueueNotFound, TopicNotFound
from dynamiq.keyspace import ID_MAX
from dynamiq.models import Outgoing, QueueRecord, QueueSettings

__all__ = ["ARCHIVE_PREFIX", "Archives", "ReplayTask", "archive_queue"]

log = logging.getLogger("dynamiq.core")

BATCH = 100
DAY_SECONDS = 86_400
# An id's time is its publisher's clock, a record's too: a walk looks this far
# beyond its range, and the record's own time decides.
CLOCK_SLACK_US = 60_000_000
ReplayState = Literal["running", "done", "failed", "cancelled"]


class ReplayTask(msgspec.Struct, frozen=True):
    """A replay as stored: which subscription, the range of publish times it replays
    (epoch ms, inclusive), the ``policy`` it was asked by (SNS's JSON, shown back),
    who runs it and where it stands (``after``: the last archive key passed)."""

    task: str
    topic: str
    queue: str
    policy: str
    start_ms: int
    end_ms: int
    node: str
    started_ms: int
    state: ReplayState = "running"
    replayed: int = 0
    after: int = -1
    error: str = ""


class ReplayProgress(msgspec.Struct, frozen=True):
    """How far a runner came, kept apart from the task's state."""

    task: str
    replayed: int
    after: int


class Archives:
    """Keeps FIFO topics' archives; starts, runs and reports the replays of this node
    (``rate``: messages a second each, 0 for as fast as the store takes them)."""

    def __init__(self, queues: QueueService, node: str, rate: float = 0.0) -> None:
        self._queues = queues
        self._store, self._catalog, self._clock = queues.context
        self._node = node
        self._rate = rate
        self._runners: Runners[ReplayTask] = Runners("replay")

    # -- the archive -----------------------------------------------------------

    async def keep(self, topic: str, days: int) -> None:
        """Archive ``topic``'s messages for ``days`` from now on (its archive made, or
        its retention changed)."""
        name = archive_queue(topic)
        retention = float(days * DAY_SECONDS)
        record = self._catalog.find(name)
        if record is None:
            settings = QueueSettings(retention_seconds=retention, fifo=True)
            await self._catalog.create_queue(name, settings, internal=True)
        elif record.settings.retention_seconds != retention:
            await self._catalog.configure_queue(name, {"retention_seconds": retention})
        if name not in self._catalog.topic(topic).subscriptions:
            await self._catalog.subscribe(topic, name, envelope=True, internal=True)

    async def drop(self, topic: str) -> None:
        """Stop archiving ``topic`` and drop what its archive holds (no archive: nothing)."""
        name = archive_queue(topic)
        if self._catalog.find(name) is None:
            return
        with contextlib.suppress(QueueNotFound):  # another node did
            await self._catalog.delete_queue(name)  # and its subscription

    def beginning_ms(self, topic: str) -> int | None:
        """The earliest publish time a replay of ``topic`` finds (epoch ms): the
        archive's start, or its retention ago; None without an archive."""
        record = self._catalog.find(archive_queue(topic))
        if record is None:
            return None
        retention_ms = round((record.settings.retention_seconds or 0) * 1000)
        return max(record.created_ms, self._clock.wall_ms() - retention_ms)

    # -- replays ---------------------------------------------------------------

    async def replay(
        self, topic: str, queue: str, policy: str, start_ms: int, end_ms: int | None
    ) -> ReplayTask:
        """Replay into ``queue`` what ``topic``'s archive holds published from
        ``start_ms`` to ``end_ms`` (None: now), in place of any replay it had."""
        beginning = self.beginning_ms(topic)
        if beginning is None:
            raise Invalid("the topic keeps no archive (ArchivePolicy)", "ReplayPolicy")
        if queue not in self._catalog.topic(topic).subscriptions:
            raise TopicNotFound(topic)
        now = self._clock.wall_ms()
        key = _key(topic, queue)
        await self._runners.stop([key])  # the replay it replaces, if it ran here
        task = ReplayTask(
            secrets.token_hex(8),
            topic,
            queue,
            policy,
            max(start_ms, beginning),
            now if end_ms is None else min(end_ms, now),
            self._node,
            now,
        )
        await self._save(task)
        self._spawn(task)
        return task

    async def status(self, topic: str, queue: str) -> ReplayTask | None:
        """The latest replay into ``queue`` of ``topic``'s archive, None if none."""
        key = _key(topic, queue)
        raw, done = await asyncio.gather(
            self._store.meta_get(key), self._store.meta_get(_progress_key(key))
        )
        return None if raw is None else _with_progress(raw, done)

    async def resume(self) -> None:
        """Resume the replays this node was running when it stopped."""
        for raw in (await self._store.meta_scan("replay/")).values():
            task = msgspec.json.decode(raw, type=ReplayTask)
            if task.state == "running" and task.node == self._node:
                task = await self.status(task.topic, task.queue) or task
                log.info(
                    "resuming the replay of %s into %s after %d replayed",
                    task.topic,
                    task.queue,
                    task.replayed,
                )
                self._spawn(task)

    async def close(self) -> None:
        """Stop running here; the tasks stay ``running`` and resume at the next start."""
        await self._runners.close()

    def _spawn(self, task: ReplayTask) -> None:
        self._runners.spawn(_key(task.topic, task.queue), task, self._step, self._failed)

    async def _failed(self, task: ReplayTask, exc: Exception) -> None:
        await self._finish(task, "failed", repr(exc))

    async def _step(self, task: ReplayTask) -> tuple[ReplayTask, float]:
        """Replay one batch; return the task as it then stands (saved), and how long
        to pause before the next to keep to the rate."""
        stored = await self.status(task.topic, task.queue)
        if stored is None or stored.task != task.task or stored.state != "running":
            return stored or msgspec.structs.replace(task, state="cancelled"), 0.0
        found = self._ends(task)
        if found is None:
            return await self._finish(task, "cancelled", "the subscription was removed"), 0.0
        archive, target, subscription = found
        started = self._clock.now()
        batch = BATCH if not self._rate else max(1, min(BATCH, math.ceil(self._rate)))
        keys = await self._next_keys(archive.uid, task, batch)
        if not keys:
            return await self._finish(task, "done"), 0.0
        records = await self._store.get(archive.uid, keys)
        copies: list[tuple[QueueRecord, bytes | Outgoing]] = []
        for key, raw in zip(keys, records, strict=True):
            if raw is not None:
                copy = _copy(task, key, raw, subscription)
                if copy is not None:
                    copies.append((target, copy))
        if copies:
            await self._queues.store_messages(copies)
        task = msgspec.structs.replace(task, after=keys[-1], replayed=task.replayed + len(copies))
        await self._store.meta_put({_progress_key(_key(task.topic, task.queue)): _progress(task)})
        if not self._rate:
            return task, 0.0
        return task, len(keys) / self._rate - (self._clock.now() - started)

    def _ends(self, task: ReplayTask) -> tuple[QueueRecord, QueueRecord, Subscription] | None:
        """The archive, the queue replayed into and its subscription; None when one is gone."""
        try:
            subscription = self._catalog.topic(task.topic).subscriptions.get(task.queue)
        except TopicNotFound:
            return None
        archive = self._catalog.find(archive_queue(task.topic))
        target = self._catalog.find(task.queue)
        if subscription is None or archive is None or target is None:
            return None
        return archive, target, subscription

    async def _next_keys(self, bucket: str, task: ReplayTask, batch: int) -> list[int]:
        """The next archive keys after ``task.after`` that may lie in its time range:
        stripe by stripe, each stripe's keys of those times."""
        lo_seq = max(0, task.start_ms * 1000 - EPOCH_US - CLOCK_SLACK_US)
        hi_seq = min(SEQ_MASK, task.end_ms * 1000 - EPOCH_US + CLOCK_SLACK_US)
        position = task.after + 1
        while position <= ID_MAX:
            first, last = stripe_range(stripe_of(position))
            lo, hi = max(position, first | lo_seq), first | hi_seq
            if lo <= hi:
                (keys,) = await self._store.scan(bucket, [(lo, hi)], batch)
                if keys:
                    return keys
            position = last + 1
        return []

    async def _finish(self, task: ReplayTask, state: ReplayState, error: str = "") -> ReplayTask:
        task = msgspec.structs.replace(task, state=state, error=error)
        await self._save(task)
        return task

    async def _save(self, task: ReplayTask) -> None:
        """Store the task, its state and its progress (its start and its end)."""
        key = _key(task.topic, task.queue)
        await self._store.meta_put(
            {key: msgspec.json.encode(task), _progress_key(key): _progress(task)}
        )


def _copy(task: ReplayTask, key: int, raw: bytes, subscription: Subscription) -> Outgoing | None:
    """What a replay stores of an archived message: None when it was published outside
    the task's range or the subscription's filter does not take it."""
    kept = message(key, raw)
    if not task.start_ms <= kept.published_ms <= task.end_ms:
        return None
    bare = unwrapped(kept.body)
    policy = subscription.filter
    if policy is not None and not policy.matches(
        Subject(bare.attributes, bare.attribute_types, bare.body)
    ):
        return None
    # Unique to the task and the message: a resumed replay repeats none it stored.
    seen = f"{task.task}\n{kept.group}\n{kept.dedup_id or key}"
    dedup_id = hashlib.sha256(seen.encode()).hexdigest()
    if subscription.envelope:
        return Outgoing(replayed(kept.body), group=kept.group, dedup_id=dedup_id)
    return msgspec.structs.replace(bare, group=kept.group, dedup_id=dedup_id)


def _key(topic: str, queue: str) -> str:
    return f"replay/{topic}/{queue}"


def _progress_key(key: str) -> str:
    """Where a replay's progress is kept, by its task's key."""
    return "replay-progress/" + key.removeprefix("replay/")


def _progress(task: ReplayTask) -> bytes:
    return msgspec.json.encode(ReplayProgress(task.task, task.replayed, task.after))


def _with_progress(raw: bytes, progress: bytes | None) -> ReplayTask:
    task = msgspec.json.decode(raw, type=ReplayTask)
    done = None if progress is None else msgspec.json.decode(progress, type=ReplayProgress)
    if done is None or done.task != task.task:
        return task
    return msgspec.structs.replace(task, replayed=done.replayed, after=done.after)
