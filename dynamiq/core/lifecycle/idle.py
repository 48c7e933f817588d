"""Auto-deleting queues: a queue with ``expires_after_seconds`` that nobody published
to, received from or reconfigured for that long is deleted, with its messages and
subscriptions, by the first node whose upkeep round notices.

Every node notes use in memory and writes it to the store (``a/<queue>``: epoch
milliseconds) in its next upkeep round; a queue's last use is the latest any
node wrote. A use another node has not written yet is at most a round old, so
a queue is deleted only ``SLACK_ROUNDS`` rounds after its window ended (what
``expires_at`` reports): never while a use within the window is still on its
way to the store, given clocks within a round of each other.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from dynamiq.core.context import EngineContext
from dynamiq.models import QueueRecord

__all__ = ["PREFIX", "IdleQueues"]

log = logging.getLogger("dynamiq.core")

PREFIX = "a/"
SLACK_ROUNDS = 2


class IdleQueues:
    """When each auto-deleting queue was last used, and which are past their time."""

    def __init__(self, context: EngineContext, round_seconds: float) -> None:
        self._store, self._catalog, self._clock = context
        self._slack_ms = round(SLACK_ROUNDS * round_seconds * 1000)
        self._unwritten: dict[str, int] = {}  # queue: last use here, not in the store yet
        self._stored: dict[str, int] = {}  # queue: last use in the store, as last read

    def used(self, names: Iterable[str]) -> None:
        """Note a publish to, or a receive from, these queues (cheap: no store call)."""
        for name in self._catalog.index.expiring_of(names):
            self._unwritten[name] = self._clock.wall_ms()

    async def changed(self, name: str) -> None:
        """Note a queue created or reconfigured: written at once."""
        record = self._catalog.find(name)
        if record is not None and record.settings.expires_after_seconds is not None:
            now = self._clock.wall_ms()
            await self._store.meta_put({PREFIX + name: b"%d" % now})
            self._stored[name] = now
            self._unwritten.pop(name, None)

    def expires_at(self, name: str) -> int | None:
        """Return when a queue will be deleted unless used (epoch ms), or None if never."""
        record = self._catalog.find(name)
        if record is None or record.settings.expires_after_seconds is None:
            return None
        return self._deadline(record, self._last_use(name) or self._clock.wall_ms())

    async def expired(self) -> list[str]:
        """Write this node's unwritten uses, read everyone's; return the auto-deleting
        queues past their time, sorted. A queue without a recorded use starts now;
        one that is another queue's dead-letter queue is kept while it is."""
        records = [
            r for r in self._catalog.index.expiring() if not self._catalog.dead_letter_users(r.name)
        ]
        if not records:
            self._unwritten.clear()
            return []
        now = self._clock.wall_ms()
        names = {r.name for r in records}
        stored = {k[len(PREFIX) :]: v for k, v in (await self._store.meta_scan(PREFIX)).items()}
        stale = [n for n in stored if n not in names]  # deleted, or no longer auto-deleting
        if stale:
            await self._store.meta_delete([PREFIX + n for n in stale])
        self._stored = {n: int(v) for n, v in stored.items() if n in names and v.isdigit()}
        fresh = {n: ms for n, ms in self._unwritten.items() if n in names}
        fresh.update({n: now for n in names if n not in self._stored and n not in fresh})
        if fresh:
            await self._store.meta_put({PREFIX + n: b"%d" % ms for n, ms in fresh.items()})
        self._unwritten.clear()
        for name, ms in fresh.items():
            self._stored[name] = max(ms, self._stored.get(name, 0))
        return sorted(r.name for r in records if self._deadline(r, self._stored[r.name]) <= now)

    async def forget(self, name: str, expired: bool) -> None:
        """Remove the recorded use of a deleted queue (in the store too when it was one
        deleted when idle: only those have one there)."""
        self._stored.pop(name, None)
        self._unwritten.pop(name, None)
        if expired:
            await self._store.meta_delete([PREFIX + name])

    def _last_use(self, name: str) -> int | None:
        uses = [t for t in (self._stored.get(name), self._unwritten.get(name)) if t is not None]
        return max(uses) if uses else None

    def _deadline(self, record: QueueRecord, last_use_ms: int) -> int:
        window = record.settings.expires_after_seconds or 0.0
        return last_use_ms + round(window * 1000) + self._slack_ms
