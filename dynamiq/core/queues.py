"""QueueService: publish, receive under leases, delete, peek, stats."""

from __future__ import annotations

import logging
from collections.abc import Container, Sequence
from dataclasses import replace

from dynamiq.core.catalog import Catalog, QueueRecord
from dynamiq.core.clock import Clock
from dynamiq.core.cursor import CURSOR_SECONDS, PartitionCursor
from dynamiq.core.ids import (
    EPOCH_US,
    STRIPES,
    IdGenerator,
    seq_of,
    stripe_range,
    stripes_within,
)
from dynamiq.core.partitions import EMPTY_HINT_SECONDS, Partition, layout
from dynamiq.core.records import RecentRecords, decode, encode
from dynamiq.core.state import QueueState, QueueStats
from dynamiq.errors import MessageNotFound, ServerError
from dynamiq.keyspace import ID_MAX, WHOLE, KeyRange
from dynamiq.metrics.base import Metrics, MetricsFanout
from dynamiq.models import HeldLease, LocalQueueStats, Message
from dynamiq.storage.base import StorageBackend

__all__ = ["QueueService", "QueueStats"]

log = logging.getLogger("dynamiq.core")

INSERT_ATTEMPTS = 5
RECENT_RECORDS_BYTES = 8 << 20  # about 8,000 messages of 1 KB


class QueueService:
    """The queue engine of one node."""

    def __init__(
        self,
        store: StorageBackend,
        catalog: Catalog,
        clock: Clock,
        ids: IdGenerator | None = None,
        keyspace: KeyRange | None = WHOLE,
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._clock = clock
        self._ids = ids or IdGenerator()
        self._metrics: Metrics = metrics or MetricsFanout([])
        self._states: dict[str, QueueState] = {}
        self._recent = RecentRecords(RECENT_RECORDS_BYTES, CURSOR_SECONDS)
        self._closing = False
        self._keyspace: KeyRange | None = None
        self._stripes = (0, STRIPES - 1)  # where publishes go: the slice's whole stripes
        self._moves = 0  # keyspace changes so far
        self.set_keyspace(keyspace)

    # -- the slice this node serves ------------------------------------------

    @property
    def keyspace(self) -> KeyRange | None:
        """The ids this node leases out now, or None while it serves nothing."""
        return self._keyspace

    def serves(self, message_id: int) -> bool:
        """Whether this node may lease ``message_id`` now."""
        ks = self._keyspace
        return ks is not None and ks[0] <= message_id <= ks[1]

    def set_keyspace(self, keyspace: KeyRange | None) -> None:
        """Serve ``keyspace`` from now on (None: serve nothing).

        Leases already granted stay (a delete or an extension through this
        node still finds them) but ids outside the new slice are not offered
        again when they end; publishes go into the new slice.
        """
        if keyspace == self._keyspace:
            return
        self._keyspace, self._moves = keyspace, self._moves + 1
        self._stripes = stripes_within(*keyspace) if keyspace else (0, STRIPES - 1)
        now = self._clock.now()
        for state in self._states.values():
            state.cursors.clear()
            if keyspace is not None:
                state.partitions.set_slice(*keyspace, now)
            state.notify()

    def export_leases(self, lo: int, hi: int) -> dict[str, list[HeldLease]]:
        """Return the live leases on ids in ``[lo, hi]``, per queue."""
        now = self._clock.now()
        out: dict[str, list[HeldLease]] = {}
        for state in self._states.values():
            held = state.leases.held_in(lo, hi, now)
            if held:
                out[state.name] = [HeldLease(mid, deadline - now) for mid, deadline in held]
        return out

    def import_leases(self, queue: str, leases: Sequence[HeldLease]) -> None:
        """Hold ids leased by another node until their lease would end there."""
        state = self._state(self._catalog.queue(queue))
        now = self._clock.now()
        for lease in leases:
            state.leases.acquire((lease.id,), now, lease.seconds_left)

    def drop_leases(self) -> int:
        """Forget every lease (this node was paused and others served its slice); return count."""
        dropped = 0
        for state in self._states.values():
            dropped += len(state.leases.release_all())
            state.cursors.clear()
        return dropped

    # -- publishing ----------------------------------------------------------

    async def publish(self, queue: str, bodies: Sequence[bytes]) -> list[int]:
        """Store messages durably in a queue; return their ids in order."""
        record = self._catalog.queue(queue)
        return await self.store_messages([(record, body) for body in bodies])

    async def store_messages(self, items: Sequence[tuple[QueueRecord, bytes]]) -> list[int]:
        """Store messages into (possibly different) queues in one commit; return ids."""
        now_ms = self._clock.wall_ms()
        rows = [(r.uid, encode(body, now_ms, r.settings.compressed_messages)) for r, body in items]
        ids = [0] * len(rows)
        todo = list(range(len(rows)))
        for _ in range(INSERT_ATTEMPTS):
            fresh = self._ids.many(len(todo), self._stripes)
            stored = await self._store.insert(
                [(rows[i][0], mid, rows[i][1]) for i, mid in zip(todo, fresh, strict=True)]
            )
            for i, mid, ok in zip(todo, fresh, stored, strict=True):
                if ok:
                    ids[i] = mid
            todo = [i for i, ok in zip(todo, stored, strict=True) if not ok]
            if not todo:
                break
        else:
            raise ServerError("found no free ids for every message; some may be stored, retry")
        now = self._clock.now()
        queues = {record.uid: record for record, _ in items}
        for uid, (mids, records) in _by_bucket(rows, ids).items():
            self._metrics.sent(queues[uid].name, len(mids))
            self._recent.add(uid, mids, records, now)
            state = self._state(queues[uid])
            state.published(mids)
            state.published_per_s.add(len(mids), now)
        return ids

    # -- receiving -----------------------------------------------------------

    async def receive(
        self,
        queue: str,
        max_messages: int,
        visibility_timeout: float | None = None,
        wait_seconds: float = 0.0,
    ) -> list[Message]:
        """Lease and return up to ``max_messages`` visible messages, oldest first.

        With ``wait_seconds``, wait for a publish (or an expiring lease) when
        nothing is visible now.
        """
        deadline = self._clock.now() + wait_seconds
        while True:
            record = self._catalog.queue(queue)
            state = self._state(record)
            lease = visibility_timeout or record.settings.visibility_timeout
            got = await self._receive_once(record, state, max_messages, lease)
            now = self._clock.now()
            if got or now >= deadline or self._closing:
                self._count_delivery(queue, state, got, max_messages)
                return got
            next_expiry = state.leases.next_deadline()
            pause = min(deadline - now, EMPTY_HINT_SECONDS)
            if next_expiry is not None:
                pause = min(pause, max(0.0, next_expiry - now))
            await state.wait(pause)

    def _count_delivery(
        self, queue: str, state: QueueState, got: list[Message], asked: int
    ) -> None:
        self._metrics.received(queue, len(got), asked)
        state.received_per_s.add(len(got), self._clock.now())
        if state.lapsed:
            again = [m.id for m in got if m.id in state.lapsed]
            if again:
                state.lapsed.difference_update(again)
                self._metrics.redelivered(queue, len(again))

    async def _receive_once(
        self, record: QueueRecord, state: QueueState, want: int, lease_seconds: float
    ) -> list[Message]:
        now = self._clock.now()
        expired = state.leases.expire(now)
        if expired:
            state.expired([mid for mid in expired if self.serves(mid)])
        out: list[Message] = []
        if self._keyspace is None:
            return out
        tried: set[int] = set()
        while len(out) < want:
            part = state.partitions.acquire(now, skip=tried)
            if part is None:
                break
            tried.add(part.index)
            try:
                got = await self._take(record.uid, state, part, want - len(out), lease_seconds)
            except BaseException:
                # A read that failed says nothing of the partition: no empty hint,
                # or the next receives would answer "nothing" instead of 503.
                state.partitions.release(part, self._clock.now(), found=True)
                raise
            state.partitions.release(part, self._clock.now(), found=bool(got))
            out.extend(got)
        return out

    async def _take(
        self, uid: str, state: QueueState, part: Partition, want: int, lease_seconds: float
    ) -> list[Message]:
        moves = self._moves
        cursor = state.cursor(part, self._clock.now())
        await self._walk(uid, cursor, want, state.leases)
        # Leased before they are read, so that a concurrent receive walking
        # the same stripes passes them by instead of reading them too.
        ids = state.leases.acquire(cursor.result, self._clock.now(), lease_seconds)
        if not ids:
            return []
        try:
            present = self._recent.take(uid, ids, self._clock.now())
            if len(present) < len(ids):
                missing = [mid for mid in ids if mid not in present]
                for mid, rec in zip(missing, await self._store.get(uid, missing), strict=True):
                    if rec is not None:
                        present[mid] = rec
        except BaseException:
            state.leases.release(ids)
            raise
        # Gone meanwhile (deleted), or, when the slice moved during the read,
        # no longer this node's to lease: let go of them.
        moved = self._moves != moves
        kept = [mid for mid in ids if mid in present and (not moved or self.serves(mid))]
        if len(kept) < len(ids):
            state.leases.release(set(ids).difference(kept))
        return [Message(mid, *decode(present[mid])) for mid in kept]

    async def _walk(
        self, uid: str, cursor: PartitionCursor, want: int, skip: Container[int]
    ) -> None:
        cursor.take(want, skip)
        while wanted := cursor.requests():
            found = await self._store.scan(
                uid, [(lo, hi) for _, lo, hi, _ in wanted], [n for *_, n in wanted]
            )
            for (lane, *_), keys in zip(wanted, found, strict=True):
                cursor.feed(lane, keys)

    # -- deleting and reading ------------------------------------------------

    async def delete(self, queue: str, ids: Sequence[int]) -> list[bool]:
        """Delete messages by id; per id, whether it existed."""
        record = self._catalog.queue(queue)
        existed = await self._store.delete(record.uid, ids)
        self._recent.discard(record.uid, ids)
        self._metrics.deleted(queue, sum(existed))
        state = self._states.get(record.uid)
        if state is not None:
            state.deleted_per_s.add(sum(existed), self._clock.now())
            state.release(ids)
        return existed

    def release(self, queue: str, ids: Sequence[int]) -> None:
        """End the leases on ``ids`` (deleted through another node)."""
        state = self._states.get(self._catalog.queue(queue).uid)
        if state is not None:
            state.release(ids)

    def change_visibility(self, queue: str, ids: Sequence[int], seconds: float) -> list[int]:
        """Extend the live leases of ``ids`` by ``seconds`` from now, or end them (0).

        Returns the ids whose lease was live on this node; a message whose
        lease ended (or that was deleted) is not leased again by this call.
        """
        record = self._catalog.queue(queue)
        state = self._state(record)
        now = self._clock.now()
        if seconds > 0:
            return state.leases.extend(ids, now, seconds)
        live = state.leases.extend(ids, now, 0.0)  # a deadline of now ends them
        state.expired(state.leases.expire(now))
        state.notify()
        return live

    async def peek(self, queue: str, message_id: int) -> Message:
        """Return a message without leasing it, or raise ``MessageNotFound``."""
        record = self._catalog.queue(queue)
        (raw,) = await self._store.get(record.uid, [message_id])
        if raw is None:
            raise MessageNotFound(queue, message_id)
        return Message(message_id, *decode(raw))

    async def peek_many(self, queue: str, count: int) -> list[Message]:
        """Return up to ``count`` of the oldest messages, leased or not, without leasing."""
        record = self._catalog.queue(queue)
        cursor = PartitionCursor(layout(0, ID_MAX, 1)[0], self._clock.now())
        await self._walk(record.uid, cursor, count, ())
        records = await self._store.get(record.uid, cursor.result)
        return [
            Message(mid, *decode(raw))
            for mid, raw in zip(cursor.result, records, strict=True)
            if raw is not None
        ]

    async def stats(self, queue: str, detailed: bool = False) -> QueueStats:
        """Return the queue's depth (real count), leases in flight and partitions.

        With ``detailed``, also the age of its oldest message (one key read per
        stripe) and its rates.
        """
        record = self._catalog.queue(queue)
        state = self._state(record)
        depth = await self._store.count(record.uid)
        basic = QueueStats(depth, len(state.leases), len(state.partitions.partitions))
        if not detailed:
            return basic
        now = self._clock.now()
        return replace(
            basic,
            oldest_age=await self._oldest_age(record.uid),
            publish_rate=state.published_per_s.rate(now),
            receive_rate=state.received_per_s.rate(now),
            delete_rate=state.deleted_per_s.rate(now),
        )

    def local_stats(self, names: Sequence[str]) -> dict[str, LocalQueueStats]:
        """Return what only this node knows of each queue it has state for."""
        now = self._clock.now()
        out: dict[str, LocalQueueStats] = {}
        for name in names:
            record = self._catalog.find(name)
            state = self._states.get(record.uid) if record else None
            if state is not None:
                out[name] = LocalQueueStats(
                    len(state.leases),
                    state.published_per_s.rate(now),
                    state.received_per_s.rate(now),
                    state.deleted_per_s.rate(now),
                )
        return out

    async def _oldest_age(self, uid: str) -> float | None:
        heads = await self._store.scan(uid, [stripe_range(s) for s in range(STRIPES)], 1)
        seqs = [seq_of(keys[0]) for keys in heads if keys]
        if not seqs:
            return None
        return max(0.0, (self._clock.wall_ms() * 1000 - EPOCH_US - min(seqs)) / 1e6)

    # -- lifecycle -----------------------------------------------------------

    async def purge(self, queue: str, drop_at_ms: int) -> int:
        """Give a queue a new, empty bucket; return how many messages the old one held.

        The old bucket is dropped from ``drop_at_ms`` on (``Catalog.purge_queue``);
        its leases end here at once, so their deletes find nothing.
        """
        held = await self._store.count(self._catalog.queue(queue).uid)
        await self._catalog.purge_queue(queue, drop_at_ms)
        self.forget_dropped()
        return held

    def forget_dropped(self) -> None:
        """Drop the in-memory state of queues that no longer exist."""
        live = self._catalog.uids()
        for uid in [u for u in self._states if u not in live]:
            self._states.pop(uid).notify()

    async def report(self) -> None:
        """Report every queue's real depth and its messages in flight on this node."""
        for name in self._catalog.queues():
            record = self._catalog.queue(name)
            state = self._states.get(record.uid)
            in_flight = len(state.leases) if state else 0
            self._metrics.queue_level(name, await self._store.count(record.uid), in_flight)

    def tidy(self) -> None:
        """Let go of recent records that are too old to be trusted (an upkeep round)."""
        self._recent.evict(self._clock.now())

    def close(self) -> None:
        """Wake every waiting receive so that it returns now; idempotent."""
        self._closing = True
        for state in self._states.values():
            state.notify()

    def _state(self, record: QueueRecord) -> QueueState:
        state = self._states.get(record.uid)
        if state is None:
            lo, hi = self._keyspace or WHOLE
            state = self._states[record.uid] = QueueState(record, lo, hi, self._clock.now())
        elif state.settings != record.settings:
            state.settings = record.settings
            state.partitions.configure(record.settings, self._clock.now())
        return state


def _by_bucket(
    rows: Sequence[tuple[str, bytes]], ids: Sequence[int]
) -> dict[str, tuple[list[int], list[bytes]]]:
    """Group stored ``(bucket, record)`` rows and their ids by bucket, in order."""
    if len({uid for uid, _ in rows}) == 1:  # one queue: the usual publish
        return {rows[0][0]: (list(ids), [record for _, record in rows])}
    out: dict[str, tuple[list[int], list[bytes]]] = {}
    for (uid, record), mid in zip(rows, ids, strict=True):
        mids, records = out.setdefault(uid, ([], []))
        mids.append(mid)
        records.append(record)
    return out
