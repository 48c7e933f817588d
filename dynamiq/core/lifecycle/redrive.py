"""Redrive: move a dead-letter queue's messages back where they came from, or to a
named queue, as a task that outlives a restart of the node running it.

A task is two records in the store: ``redrive/<queue>`` (what it moves, who
runs it, its state) and ``redrive-progress/<queue>`` (how far its walk over
the dead-letter queue's keys has come, how many it moved). The node that
started it runs it and alone writes its progress, after every batch; any node
reads it (``GET``) or cancels it by writing the state (the runner reads it
before each batch and stops). A node that restarts resumes
the tasks it was running from their last key. Each message is moved with
``StorageBackend.move``: into the target first where the store cannot do both
at once, so a crash between the two leaves a copy in both (at-least-once),
never none. A moved message starts a new life: receive count 0, no
dead-letter note.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
from typing import Literal

import msgspec

from dynamiq.core.context import EngineContext
from dynamiq.core.delivery.registry import QueueStates
from dynamiq.core.lifecycle.life import Lifecycle
from dynamiq.core.lifecycle.tasks import Runners
from dynamiq.core.publish.attempts import placed
from dynamiq.core.records import Meta, meta_of, new_life, with_meta
from dynamiq.errors import Invalid, RedriveRunning
from dynamiq.keyspace import ID_MAX

__all__ = ["RedriveTask", "Redriver"]

log = logging.getLogger("dynamiq.core")

BATCH = 100
TaskState = Literal["running", "done", "cancelled", "failed"]
Move = tuple[str, int, str, bytes]  # (source bucket, key, target bucket, record)


class RedriveTask(msgspec.Struct, frozen=True):
    """A redrive as stored: what it moves, where it stands, who runs it.

    ``to`` None sends each message back to the queue its note names;
    ``after`` is the last key of the dead-letter queue the walk passed;
    ``started_ms`` is when it started (0 for a task stored before it was kept).
    """

    task: str
    queue: str
    to: str | None
    max_per_second: float | None
    node: str
    state: TaskState = "running"
    moved: int = 0
    skipped: int = 0
    after: int = -1
    error: str = ""
    started_ms: int = 0


class RedriveProgress(msgspec.Struct, frozen=True):
    """How far a runner came, kept apart from the task's state."""

    task: str
    moved: int
    skipped: int
    after: int


class Redriver:
    """Starts, runs, reports and cancels the redrives of this node."""

    def __init__(
        self, context: EngineContext, node: str, states: QueueStates, life: Lifecycle
    ) -> None:
        self._store, self._catalog, self._clock = context
        self._node = node
        self._states = states  # fresh ids in this node's slice; who to tell of arrivals
        self._life = life  # counts what was redriven
        self._runners: Runners[RedriveTask] = Runners("redrive")

    async def start(self, queue: str, to: str | None, max_per_second: float | None) -> RedriveTask:
        """Start moving ``queue``'s messages; raise ``RedriveRunning`` if a redrive of it runs."""
        self._catalog.queue(queue)
        if to is not None:
            self._catalog.queue(to)
            if to == queue:
                raise Invalid("a redrive cannot move a queue into itself", "to")
        current = await self.status(queue)
        if current is not None and current.state == "running":
            raise RedriveRunning(queue, current.task)
        task = RedriveTask(
            secrets.token_hex(8),
            queue,
            to,
            max_per_second,
            self._node,
            started_ms=self._clock.wall_ms(),
        )
        await self._save(task)
        self._spawn(task)
        return task

    async def status(self, queue: str) -> RedriveTask | None:
        """Return the latest redrive of ``queue``, None if it never had one."""
        raw, done = await asyncio.gather(
            self._store.meta_get(_key(queue)), self._store.meta_get(_progress_key(queue))
        )
        return None if raw is None else _with_progress(raw, done)

    async def cancel(self, queue: str) -> RedriveTask | None:
        """Stop a running redrive of ``queue`` (what it moved stays moved); return it."""
        await self._runners.stop([queue])  # stopped here first: no progress saved after wins
        task = await self.status(queue)
        if task is not None and task.state == "running":
            # The state only: a runner elsewhere owns the progress, and stops at its
            # next batch when it reads this.
            task = msgspec.structs.replace(task, state="cancelled")
            await self._store.meta_put({_key(queue): _json(task)})
        return task

    def running(self) -> list[str]:
        """The dead-letter queues whose redrive runs on this node now, sorted."""
        return self._runners.running()

    async def resume(self) -> None:
        """Resume the redrives this node was running when it stopped."""
        for raw in (await self._store.meta_scan("redrive/")).values():
            task = msgspec.json.decode(raw, type=RedriveTask)
            if task.state == "running" and task.node == self._node:
                task = await self.status(task.queue) or task
                log.info("resuming the redrive of %s after %d moved", task.queue, task.moved)
                self._spawn(task)

    async def close(self) -> None:
        """Stop running here; the tasks stay ``running`` and resume at the next start."""
        await self._runners.close()

    def _spawn(self, task: RedriveTask) -> None:
        self._runners.spawn(task.queue, task, self._step, self._failed)

    async def _failed(self, task: RedriveTask, exc: Exception) -> None:
        await self._save(msgspec.structs.replace(task, state="failed", error=repr(exc)))

    async def _step(self, task: RedriveTask) -> tuple[RedriveTask, float]:
        """Move one batch; return the task as it then stands (saved), and how long to
        pause before the next batch to keep to ``max_per_second``."""
        stored = await self.status(task.queue)
        if stored is None or stored.task != task.task or stored.state != "running":
            return stored or msgspec.structs.replace(task, state="cancelled"), 0.0
        source = self._catalog.find(task.queue)
        if source is None:
            return await self._finish(task, "failed", "the dead-letter queue was deleted"), 0.0
        started = self._clock.now()
        # A slow rate moves what one second allows at a time, not a whole batch at once.
        rate = task.max_per_second
        batch = BATCH if not rate else max(1, min(BATCH, math.ceil(rate)))
        (keys,) = await self._store.scan(source.uid, [(task.after + 1, ID_MAX)], batch)
        if not keys:
            return await self._finish(task, "done"), 0.0
        records = await self._store.get(source.uid, keys)
        moves: list[Move] = []
        skipped = 0
        for key, raw in zip(keys, records, strict=True):
            if raw is None:
                continue
            target = self._target(task, raw)
            if target is None:
                skipped += 1
                continue
            moves.append((source.uid, key, target, with_meta(raw, _reborn(raw))))
        moved = await self._move(moves)
        self._count_redriven(task.queue, moved)
        task = msgspec.structs.replace(
            task, after=keys[-1], moved=task.moved + moved, skipped=task.skipped + skipped
        )
        await self._save_progress(task)
        if not task.max_per_second:
            return task, 0.0
        return task, len(keys) / task.max_per_second - (self._clock.now() - started)

    def _count_redriven(self, queue: str, count: int) -> None:
        if (record := self._catalog.find(queue)) is not None:
            self._life.note(record, self._states.of(record), "redriven", count)

    def _target(self, task: RedriveTask, raw: bytes) -> str | None:
        """The bucket a message goes to: the task's queue, else the one its note names."""
        name = task.to
        if name is None:
            note = meta_of(raw)[1].dead_letter
            name = note.source_queue if note else None
        record = self._catalog.find(name) if name else None
        return record.uid if record else None

    async def _move(self, moves: list[Move]) -> int:
        """Move ``(source, key, target, value)`` items under fresh ids (drawn again where
        one was taken); return how many moved."""
        moved = 0

        async def attempt(todo: list[Move], tries: int) -> list[Move]:
            nonlocal moved
            fresh = self._states.new_ids(len(todo))
            items = [(s, k, t, new, v) for (s, k, t, v), new in zip(todo, fresh, strict=True)]
            done = await self._store.move(items)
            arrived: dict[str, list[int]] = {}
            for (_, _, target, new, _), ok in zip(items, done, strict=True):
                if ok:
                    arrived.setdefault(target, []).append(new)
                    moved += 1
            for target, ids in arrived.items():
                self._states.arrived(target, ids)
            return [m for m, ok in zip(todo, done, strict=True) if ok is None]

        # Ids taken every time (five draws) leave a message where it is: a later
        # redrive moves it.
        await placed(moves, attempt)
        return moved

    async def _finish(self, task: RedriveTask, state: TaskState, error: str = "") -> RedriveTask:
        task = msgspec.structs.replace(task, state=state, error=error)
        await self._save(task)
        return task

    async def _save(self, task: RedriveTask) -> None:
        """Store the task, its state and its progress (its start and its end)."""
        progress = RedriveProgress(task.task, task.moved, task.skipped, task.after)
        await self._store.meta_put(
            {_key(task.queue): _json(task), _progress_key(task.queue): _json(progress)}
        )

    async def _save_progress(self, task: RedriveTask) -> None:
        """Store how far the runner came; only the runner writes it, so a cancel from
        another node (which writes the state) is never overwritten by it."""
        progress = RedriveProgress(task.task, task.moved, task.skipped, task.after)
        await self._store.meta_put({_progress_key(task.queue): _json(progress)})


def _json(value: object) -> bytes:
    return msgspec.json.encode(value)


def _key(queue: str) -> str:
    return f"redrive/{queue}"


def _progress_key(queue: str) -> str:
    return f"redrive-progress/{queue}"


def _with_progress(raw: bytes, progress: bytes | None) -> RedriveTask:
    task = msgspec.json.decode(raw, type=RedriveTask)
    done = None if progress is None else msgspec.json.decode(progress, type=RedriveProgress)
    if done is None or done.task != task.task:
        return task
    return msgspec.structs.replace(task, moved=done.moved, skipped=done.skipped, after=done.after)


def _reborn(raw: bytes) -> Meta:
    """A redriven message's metadata: counted from zero, no note; its expiry and
    what its producer attached kept."""
    meta = meta_of(raw)[1]
    return new_life(meta, expires_ms=meta.expires_ms)
