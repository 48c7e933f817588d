"""Background expiry: messages past their time go without a receive reaching them.

Retention: ids are time-ordered within a stripe, so a queue's messages past
its ``retention_seconds`` are the first keys of each stripe, and one bounded
scan finds them.

Time to live: a message published with ``ttl_seconds`` also gets a *hint* in
its queue's expiry index, a bucket beside the queue's own
(``expiry_bucket``), in the same insert as the message (one commit on LMDB).
A hint's key is the message's stripe and its expiry time, so the hints due
in a node's slice are again the first keys of each stripe; its value is the
message's id. A hint only says where to look: the message's record decides
(a hint of a message deleted, moved or never stored is dropped unread).

Each node tidies its own slice, at most ``budget`` messages per round.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from typing import NamedTuple

from dynamiq.core.catalog import Catalog, QueueRecord, expiry_bucket
from dynamiq.core.clock import Clock
from dynamiq.core.ids import EPOCH_US, SEQ_BITS, STRIPES, seq_of, stripe_of, stripe_range
from dynamiq.core.lifecycle import Lifecycle
from dynamiq.core.records import meta_of
from dynamiq.core.state import QueueState
from dynamiq.keyspace import KeyRange
from dynamiq.storage.base import StorageBackend

__all__ = ["Expiry", "Hint", "hint_rows", "store_hints"]

log = logging.getLogger("dynamiq.core")

HINT_ATTEMPTS = 5
_ID = struct.Struct(">q")


class Hint(NamedTuple):
    """A stored message that expires: its queue's bucket, its id, when (wall ms)."""

    bucket: str
    id: int
    expires_ms: int


def hint_rows(hints: Sequence[Hint], bump: int = 0) -> list[tuple[str, int, bytes]]:
    """Return the expiry-index rows of ``hints``: keyed by stripe and expiry time.

    The microseconds of the key are those of the message's id (plus ``bump``),
    so the messages of one batch, which share a stripe and an expiry
    millisecond, get keys of their own.
    """
    return [
        (
            expiry_bucket(h.bucket),
            stripe_of(h.id) << SEQ_BITS
            | (h.expires_ms * 1000 - EPOCH_US + seq_of(h.id) % 1000 + bump),
            _ID.pack(h.id),
        )
        for h in hints
    ]


async def store_hints(store: StorageBackend, hints: Sequence[Hint]) -> None:
    """Store hints whose key another message's hint holds, a microsecond later each try."""
    todo = list(hints)
    for bump in range(1, HINT_ATTEMPTS + 1):
        stored = await store.insert(hint_rows(todo, bump))
        todo = [h for h, ok in zip(todo, stored, strict=True) if not ok]
        if not todo:
            return
    log.warning(
        "%d messages have no expiry hint: they expire when a receive reaches them", len(todo)
    )


class Expiry:
    """Removes (or dead-letters) what is past its retention or its time to live."""

    def __init__(
        self, store: StorageBackend, catalog: Catalog, clock: Clock, life: Lifecycle
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._clock = clock
        self._life = life

    async def run(
        self, keyspace: KeyRange, state_of: Callable[[QueueRecord], QueueState], budget: int
    ) -> int:
        """Expire up to ``budget`` messages of ``keyspace``; return how many went."""
        removed = 0
        now_ms = self._clock.wall_ms()
        for name in self._catalog.queues():
            if removed >= budget:
                break
            record = self._catalog.find(name)
            if record is None:
                continue
            retention = record.settings.retention_seconds
            if retention is not None:
                cutoff = (now_ms - int(retention * 1000)) * 1000 - EPOCH_US
                removed += await self._retained(
                    record, state_of, keyspace, cutoff, budget - removed
                )
            if removed < budget:
                removed += await self._timed_out(
                    record, state_of, keyspace, now_ms, budget - removed
                )
        return removed

    async def _retained(
        self,
        record: QueueRecord,
        state_of: Callable[[QueueRecord], QueueState],
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
        await self._life.expire(record, state_of(record), old)
        return len(old)

    async def _timed_out(
        self,
        record: QueueRecord,
        state_of: Callable[[QueueRecord], QueueState],
        keyspace: KeyRange,
        now_ms: int,
        budget: int,
    ) -> int:
        """Expire the messages whose time to live ran out, as their hints say."""
        index = expiry_bucket(record.uid)
        found = await self._store.scan(index, _heads(keyspace, now_ms * 1000 - EPOCH_US), budget)
        keys = sorted(key for part in found for key in part)[:budget]
        if not keys:
            return 0
        hinted = [_ID.unpack(raw)[0] for raw in await self._store.get(index, keys) if raw]
        ids = list(dict.fromkeys(hinted))  # a hint stored twice (a retried insert) counts once
        raws = await self._store.get(record.uid, ids)
        due = [
            (mid, raw)
            for mid, raw in zip(ids, raws, strict=True)
            if raw is not None and 0 < meta_of(raw)[1].expires_ms <= now_ms
        ]
        if due:
            await self._life.expire(record, state_of(record), due)
        await self._store.delete(index, keys)
        return len(due)


def _heads(keyspace: KeyRange, upto: int) -> list[KeyRange]:
    """The ranges of each stripe of ``keyspace`` up to seq ``upto``."""
    lo, hi = keyspace
    return [
        (max(lo, first), min(hi, first | upto))
        for first, last in map(stripe_range, range(STRIPES))
        if first <= hi and last >= lo
    ]
