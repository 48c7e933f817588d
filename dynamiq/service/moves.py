"""What moves messages in the background, as tasks that outlive a restart: redrives of
dead-letter queues, and replays of FIFO topics' archives into their subscriptions."""

from __future__ import annotations

from dynamiq.core.archives import Archives, ReplayTask
from dynamiq.core.lifecycle.redrive import Redriver, RedriveTask
from dynamiq.core.queues import QueueService
from dynamiq.errors import NotFound
from dynamiq.service.reports import RedriveView, ReplayView

__all__ = ["Moves"]


class Moves:
    """Starts, reports and stops a node's redrives and replays, and keeps archives."""

    def __init__(self, redriver: Redriver, archives: Archives, queues: QueueService) -> None:
        self._redriver = redriver
        self._archives = archives
        self._queues = queues

    # -- redrives --------------------------------------------------------------

    async def redrive(
        self, queue: str, to: str | None = None, max_per_second: float | None = None
    ) -> RedriveView:
        """Start moving a dead-letter queue's messages back (or ``to`` a queue)."""
        task = await self._redriver.start(queue, to, max_per_second)
        return await self._redrive_view(task)

    async def redrive_status(self, queue: str) -> RedriveView:
        """Return the latest redrive of a queue, or raise ``NotFound``."""
        return await self._redrive_view(await self._redriver.status(queue))

    async def cancel_redrive(self, queue: str) -> RedriveView:
        """Stop a running redrive (what it moved stays moved); return where it stopped."""
        return await self._redrive_view(await self._redriver.cancel(queue))

    async def _redrive_view(self, task: RedriveTask | None) -> RedriveView:
        if task is None:
            raise NotFound("This queue has never been redriven.")
        remaining = await self._queues.stats(task.queue)
        return RedriveView(
            task.task,
            task.state,
            task.moved,
            remaining.depth,
            task.to,
            task.skipped,
            task.max_per_second,
            task.error or None,
            task.started_ms,
        )

    # -- archives and replays ----------------------------------------------------

    async def archive_topic(self, topic: str, days: int | None) -> None:
        """Keep what is published to ``topic`` for ``days`` days, for replays; None:
        keep nothing, and drop what is kept."""
        if days is None:
            await self._archives.drop(topic)
        else:
            await self._archives.keep(topic, days)

    def archive_beginning_ms(self, topic: str) -> int | None:
        """The earliest publish time a replay of ``topic`` finds (None: no archive)."""
        return self._archives.beginning_ms(topic)

    async def replay(
        self, topic: str, queue: str, policy: str, start_ms: int, end_ms: int | None
    ) -> ReplayView:
        """Deliver again into ``queue`` (subscribed to ``topic``) what the topic's archive
        holds published from ``start_ms`` to ``end_ms`` (None: now), in place of any
        replay it had; ``policy`` is what asked for it, shown back."""
        return _replay_view(await self._archives.replay(topic, queue, policy, start_ms, end_ms))

    async def replay_status(self, topic: str, queue: str) -> ReplayView | None:
        """The latest replay into ``queue`` of ``topic``'s archive (None: none)."""
        task = await self._archives.status(topic, queue)
        return None if task is None else _replay_view(task)


def _replay_view(task: ReplayTask) -> ReplayView:
    return ReplayView(task.policy, task.state, task.after >= 0)
