"""Background upkeep of the engine: reload configuration, delete idle auto-deleting
queues, finish queue deletions."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from dynamiq.core.catalog.news import CatalogNews
from dynamiq.core.lifecycle.idle import IdleQueues
from dynamiq.core.queues import QueueService
from dynamiq.core.rounds import every
from dynamiq.errors import QueueInUse, QueueNotFound

__all__ = ["Janitor"]

log = logging.getLogger("dynamiq.core")

IDLE_STATE_SECONDS = 60.0  # a queue unused this long keeps no state in memory


class Janitor:
    """Keeps the cached catalog fresh, drops deleted queues' messages, tidies the store."""

    def __init__(
        self,
        queues: QueueService,
        interval: float,
        reloads: Sequence[Callable[[], Awaitable[None]]] = (),
    ) -> None:
        self._store, self._catalog, self._clock = queues.context
        self._reloads = reloads  # what else is cached from the store: reloaded alike
        self._queues = queues
        self._interval = interval
        self._kicked = asyncio.Event()
        self.idle = IdleQueues(queues.context, interval)

    def drop_time_ms(self) -> int:
        """When a bucket let go of now may be dropped: every node has reloaded by then.

        Nodes that missed the announcement follow the catalog's log every
        ``interval`` (or read it whole when they fell behind it); two
        intervals of wall-clock time cover a round in progress and the skew
        between the nodes' clocks (assumed well under one interval).
        """
        return self._clock.wall_ms() + int(2 * self._interval * 1000)

    def kick(self) -> None:
        """Ask for a round now (a queue was deleted)."""
        self._kicked.set()

    async def reload(self) -> None:
        """Reload the catalog (and the other caches) and forget the state of queues that
        are gone."""
        self._queues.forget_dropped(await self._catalog.reload())
        for reload in self._reloads:
            await reload()

    async def refresh(self, news: CatalogNews) -> None:
        """Read again what a change made through another process touched (all of it,
        the other caches too, when the news does not say)."""
        if news.everything:
            await self.reload()
        else:
            self._queues.forget_dropped(await self._catalog.refresh(news))

    async def run_once(self) -> None:
        """Follow the catalog's changes, forget deleted queues, drop their messages, tidy
        the store."""
        self._queues.forget_dropped(await self._catalog.follow())
        for reload in self._reloads:
            await reload()
        await self._catalog.trim_log()
        self._queues.states.drop_idle(IDLE_STATE_SECONDS)
        await self._delete_idle()
        self._queues.tidy()
        await self._queues.expire_due()
        for uid in await self._catalog.pending_drops(self._clock.wall_ms()):
            await self._catalog.finish_drop(uid)
        await self._store.maintain()

    async def _delete_idle(self) -> None:
        """Delete the auto-deleting queues nobody used for their ``expires_after_seconds``."""
        for name in await self.idle.expired():
            record = self._catalog.find(name)
            try:
                uid = await self._catalog.delete_queue(name)
            except (QueueNotFound, QueueInUse):
                continue  # deleted, or made a dead-letter queue, meanwhile
            await self.idle.forget(name, expired=True)
            self._queues.forget_dropped([uid])
            window = record.settings.expires_after_seconds if record else None
            log.info("queue %s deleted: unused for %gs (expires_after_seconds)", name, window)

    async def janitor_loop(self) -> None:
        """Run rounds every ``interval`` seconds or when kicked, until cancelled."""
        await every(self._interval, self.run_once, "upkeep round", self._kicked)
