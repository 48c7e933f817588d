"""Background expiry: messages past their time go without a receive reaching them.

Retention: ids are time-ordered within a stripe, so a queue's messages past
its ``retention_seconds`` are the first keys of each stripe, and one bounded
scan finds them. A round looks at a bounded number of the queues that have
a retention, taking up where the last round stopped.

Time to live: a message published with ``ttl_seconds`` also gets a *hint* in
the expiry index (``publish.hints``), in the same insert as the message (one
commit on LMDB). The hints due in a node's slice are the first keys of each
stripe, so one scan per round finds them whatever the number of queues. A
hint only says where to look: the message's record decides (a hint of a
message deleted, moved, purged or never stored is dropped unread).

Each node tidies its own slice, at most ``budget`` messages per round.
"""

from __future__ import annotations

import logging

from dynamiq.core.context import EngineContext
from dynamiq.core.delivery.registry import QueueStates
from dynamiq.core.ids import EPOCH_US, STRIPES, stripe_range
from dynamiq.core.lifecycle.life import Lifecycle
from dynamiq.core.publish.hints import EXPIRY_INDEX, HINT_ID
from dynamiq.core.records import meta_of
from dynamiq.keyspace import KeyRange
from dynamiq.models import QueueRecord

__all__ = ["Expiry"]

log = logging.getLogger("dynamiq.core")

# The queues with a retention whose oldest messages one round looks at.
RETENTION_QUEUES_PER_ROUND = 32


class Expiry:
    """Removes (or dead-letters) what is past its retention or its time to live."""

    def __init__(self, context: EngineContext, life: Lifecycle, states: QueueStates) -> None:
        self._store, self._catalog, self._clock = context
        self._life = life
        self._states = states
        self._next_retained = 0  # where the next round's look at retention starts

    async def run(self, budget: int) -> int:
        """Expire up to ``budget`` messages of this node's slice; return how many went."""
        keyspace = self._states.keyspace
        if keyspace is None:
            return 0
        now_ms = self._clock.wall_ms()
        removed = await self._timed_out(keyspace, now_ms, budget)
        retained = self._catalog.index.retained()
        start = self._next_retained % len(retained) if retained else 0
        for record in (retained[start:] + retained[:start])[:RETENTION_QUEUES_PER_ROUND]:
            if removed >= budget:
                break
            retention = record.settings.retention_seconds or 0.0
            cutoff = (now_ms - int(retention * 1000)) * 1000 - EPOCH_US
            removed += await self._retained(record, keyspace, cutoff, budget - removed)
            start += 1
        self._next_retained = start
        return removed

    async def _retained(
        self,
        record: QueueRecord,
        keyspace: KeyRange,
        cutoff: int,
        budget: int,
    ) -> int:
        """Expire the messages published (or due) before ``cutoff`` (a seq)."""
        if cutoff <= 0:
            return 0
        found = await self._store.scan(record.uid, _heads(keyspace, cutoff), budget)
        ids = sorted(mid for keys in found for mid in keys)[:budget]
        if not ids:
            return 0
        raws = await self._store.get(record.uid, ids)
        old = [(mid, raw) for mid, raw in zip(ids, raws, strict=True) if raw is not None]
        await self._life.expire(record, self._states.of(record), old)
        return len(old)

    async def _timed_out(
        self,
        keyspace: KeyRange,
        now_ms: int,
        budget: int,
    ) -> int:
        """Expire the messages whose time to live ran out, as their hints say."""
        heads = _heads(keyspace, now_ms * 1000 - EPOCH_US)
        found = await self._store.scan(EXPIRY_INDEX, heads, budget)
        keys = sorted(key for part in found for key in part)[:budget]
        if not keys:
            return 0
        hinted: dict[str, list[int]] = {}
        for raw in await self._store.get(EXPIRY_INDEX, keys):
            if raw:
                mids = hinted.setdefault(raw[HINT_ID.size :].decode(), [])
                mids.append(HINT_ID.unpack_from(raw)[0])
        removed = 0
        for uid, mids in hinted.items():
            record = self._catalog.index.by_uid(uid)
            if record is None:  # its queue was deleted or purged
                continue
            ids = list(dict.fromkeys(mids))  # a hint stored twice (a retried insert) counts once
            raws = await self._store.get(uid, ids)
            due = [
                (mid, raw)
                for mid, raw in zip(ids, raws, strict=True)
                if raw is not None and 0 < meta_of(raw)[1].expires_ms <= now_ms
            ]
            if due:
                await self._life.expire(record, self._states.of(record), due)
                removed += len(due)
        await self._store.delete(EXPIRY_INDEX, keys)
        return removed


def _heads(keyspace: KeyRange, upto: int) -> list[KeyRange]:
    """The ranges of each stripe of ``keyspace`` up to seq ``upto``."""
    lo, hi = keyspace
    return [
        (max(lo, first), min(hi, first | upto))
        for first, last in map(stripe_range, range(STRIPES))
        if first <= hi and last >= lo
    ]
