"""QueueService: publish, receive under leases, delete, peek, stats.

A delayed message's id carries its due time (``IdGenerator.due``): the
oldest-first walk stops at the first id not due, and says when it will be.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import Clock
from dynamiq.core.context import EngineContext
from dynamiq.core.custody.handover import Custody
from dynamiq.core.custody.journal import LeaseJournal
from dynamiq.core.delivery.census import Held, held
from dynamiq.core.delivery.cursor import CURSOR_SECONDS, PartitionCursor
from dynamiq.core.delivery.partitions import EMPTY_HINT_SECONDS, Partition, layout
from dynamiq.core.delivery.rates import Event
from dynamiq.core.delivery.registry import QueueStates
from dynamiq.core.delivery.state import QueueState, QueueStats, Stirred
from dynamiq.core.delivery.walks import walk
from dynamiq.core.ids import EPOCH_US, IdGenerator
from dynamiq.core.lifecycle.expiry import Expiry
from dynamiq.core.lifecycle.life import Lifecycle
from dynamiq.core.publish.capacity import check_room
from dynamiq.core.publish.dedup import claims_of
from dynamiq.core.publish.insert import store_messages
from dynamiq.core.publish.outgoing import by_bucket, outgoing_rows
from dynamiq.core.records import RecentRecords, message
from dynamiq.core.rounds import every
from dynamiq.errors import MessageNotFound
from dynamiq.keyspace import ID_MAX, WHOLE, KeyRange
from dynamiq.metrics.base import Metrics, MetricsFanout
from dynamiq.models import LocalQueueStats, Message, Outgoing, Published, QueueRecord
from dynamiq.storage.base import StorageBackend

__all__ = ["QueueService", "QueueStats"]

log = logging.getLogger("dynamiq.core")

RECENT_RECORDS_BYTES = 8 << 20  # about 8,000 messages of 1 KB
NOTHING_HERE = LocalQueueStats()
RECENT_BUCKETS = 64  # a publish into more queues keeps records only of those in use here
EXPIRY_BATCH = 1000  # expired messages removed per upkeep round, at most
SWEEP_SECONDS = 0.25  # how often lapsed leases are looked at without a receive
# A receive whose reads took longer leases what it hands out anew from the answer.
SLOW_READ_SECONDS = 0.5


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
        journal: LeaseJournal | None = None,
        awake: Callable[[], bool] = lambda: True,
        stirred: Stirred | None = None,
    ) -> None:
        self._store = store
        # False while this node's view may be stale after a pause of the process.
        self._awake = awake
        self._catalog = catalog
        self._clock = clock
        self._metrics: Metrics = metrics or MetricsFanout([])
        self.context = EngineContext(store, catalog, clock)
        self.states = QueueStates(clock, ids, keyspace, stirred)
        self._recent = RecentRecords(RECENT_RECORDS_BYTES, CURSOR_SECONDS)
        self._closing = False
        self.life = Lifecycle(self.context, self._metrics, self.states, journal)
        self._expiry = Expiry(self.context, self.life, self.states)
        self.custody = Custody(self.context, journal, self.states)

    # -- the slice this node serves ------------------------------------------

    @property
    def keyspace(self) -> KeyRange | None:
        """The ids this node leases out now, or None while it serves nothing."""
        return self.states.keyspace

    def serves(self, message_id: int) -> bool:
        """Whether this node may lease ``message_id`` now."""
        return self.states.serves(message_id)

    def set_keyspace(self, keyspace: KeyRange | None) -> None:
        """Serve ``keyspace`` from now on (None: serve nothing). Leases already granted
        stay (a delete or an extension through this node still finds them), but ids
        outside the new slice are not offered again when they end; publishes go into
        the new slice; what was known of the groups outside it is forgotten (stale)."""
        self.states.set_keyspace(keyspace)

    # -- publishing ----------------------------------------------------------

    async def publish(self, queue: str, messages: Sequence[bytes | Outgoing]) -> Published[int]:
        """Store messages durably in a queue; return their ids in order.

        A message is a body, or an ``Outgoing`` with a delay, a time to live,
        attributes or a dedup id.
        """
        record = self._catalog.queue(queue)
        return await self.store_messages([(record, m) for m in messages])

    async def store_messages(
        self, items: Sequence[tuple[QueueRecord, bytes | Outgoing]]
    ) -> Published[int]:
        """Store messages into (possibly different) queues in one commit; return ids.

        A message without a delay of its own gets its queue's ``delay_seconds``;
        one its queue has seen within the dedup window is not stored (``dedup``).

        Raises:
            QueueFull: a queue would pass its ``max_depth``; nothing is stored.
        """
        await check_room(self._store, items)
        now_us = self._clock.wall_us()
        rows = outgoing_rows(items, now_us)
        now_ms = now_us // 1000
        claims = claims_of(items, now_ms)
        done = await store_messages(
            self._store, self.states.ids, self.states.stripes, rows, claims, now_ms
        )
        queues = {record.uid: record for record, _ in items}
        woke = self.landed(queues, by_bucket(done.rows.rows, done.stored))
        # A duplicate's first copy may be from an attempt that failed after storing
        # it, before telling the walks: they are told now.
        for uid, firsts in done.firsts(items).items():
            state = self.states.of(queues[uid])
            woke = state.published(firsts) or woke
            self.life.note(queues[uid], state, "deduplicated", len(firsts))
        if woke:  # the receives it woke answer first: a message's latency is theirs
            await asyncio.sleep(0)
        return Published(done.ids, done.duplicate)

    def landed(
        self, queues: dict[str, QueueRecord], stored: dict[str, tuple[list[int], list[bytes]]]
    ) -> bool:
        """Count, keep and announce messages just stored: per bucket (of ``queues``),
        their ids and records. Return whether a receive waiting here woke."""
        now = self._clock.now()
        self._metrics.sent({queues[uid].name: len(mids) for uid, (mids, _) in stored.items()})
        self.states.activity.add_each(
            Event.PUBLISHED, ((uid, len(mids)) for uid, (mids, _) in stored.items()), now
        )
        woke = False
        # No state made: a first receive here walks the store (a fan-out makes none)
        for uid in stored if len(stored) <= RECENT_BUCKETS else self.states.among(stored):
            mids, records = stored[uid]
            self._recent.add(uid, mids, records, now)
            if (state := self.states.get(uid)) is not None:
                woke = state.published(mids) or woke
        return woke

    # -- receiving -----------------------------------------------------------

    async def receive(
        self,
        queue: str,
        max_messages: int,
        visibility_timeout: float | None = None,
        wait_seconds: float = 0.0,
    ) -> list[Message]:
        """Lease and return up to ``max_messages`` visible messages, oldest first.

        With ``wait_seconds``, wait for a publish (or an expiring lease, or a
        delayed message coming due) when nothing is visible now; or until a
        peer says it has messages of the queue (``peer_news``): then return,
        with nothing, for the caller to ask the peers.
        """
        deadline = self._clock.now() + wait_seconds
        news: int | None = None
        while True:
            record = self._catalog.queue(queue)
            state = self.states.of(record)
            lease = (
                record.settings.visibility_timeout
                if visibility_timeout is None
                else visibility_timeout
            )
            seen = state.changes
            news = state.news if news is None else news
            got = await self._receive_once(record, state, max_messages, lease)
            now = self._clock.now()
            if got or now >= deadline or self._closing or state.news != news:
                self._count_delivery(record, state, got, max_messages)
                return got
            if state.changes != seen:  # a publish came while this receive looked: again
                continue
            pause = min(deadline - now, EMPTY_HINT_SECONDS)
            for then in (state.leases.next_deadline(), state.next_due):
                if then is not None:
                    pause = min(pause, max(0.0, then - now))
            await state.wait(pause, self._clock)

    def _count_delivery(
        self, record: QueueRecord, state: QueueState, got: list[Message], asked: int
    ) -> None:
        self._metrics.received(record.name, len(got), asked)
        if got:
            self.states.activity.add(Event.RECEIVED, record.uid, len(got), self._clock.now())
            if again := state.delivered(got):
                self._metrics.redelivered(record.name, again)

    async def _receive_once(
        self, record: QueueRecord, state: QueueState, want: int, lease_seconds: float
    ) -> list[Message]:
        now = self._clock.now()
        await self.life.lapsed(record, state, state.leases.expire(now))
        out: list[Message] = []
        if self.states.keyspace is None:
            return out
        if state.next_due is not None and state.next_due <= now:
            state.next_due = state.partitions.next_hint_end(now)  # passed: what ends next
        # With noisy tenants, every partition is first looked at for the others'.
        ranks = state.ranks()
        for upto in (0, None) if ranks else (None,):
            tried: set[int] = set()
            while len(out) < want:
                part = state.partitions.acquire(now, skip=tried)
                if part is None:
                    break
                tried.add(part.index)
                take = self._take(record, state, part, want - len(out), lease_seconds, ranks, upto)
                try:
                    got, due_at, held_back = await self.states.walks.run(self.states.moves, take)
                except BaseException:
                    # A read that failed says nothing of the partition: no empty hint,
                    # or the next receives would answer "nothing" instead of 503; and
                    # what the walk took is met again.
                    state.partitions.release(part, self._clock.now(), found=True)
                    state.walk_afresh(part)
                    raise
                found = bool(got) or held_back
                state.partitions.release(part, self._clock.now(), found, due_at)
                if due_at is not None and (state.next_due is None or due_at < state.next_due):
                    state.next_due = due_at
                out.extend(got)
        return out

    async def _take(
        self,
        record: QueueRecord,
        state: QueueState,
        part: Partition,
        want: int,
        lease: float,
        ranks: Mapping[int, int],
        upto: int | None,
    ) -> tuple[list[Message], float | None, bool]:
        """Lease and deliver up to ``want`` of a partition's oldest due messages, by
        their stripes' ``ranks`` and of those ranked ``upto`` at most (``fairness``).

        Returns them, when the partition's next delayed message is due
        (monotonic seconds) if the walk stopped at one, and whether it stopped
        at a message ranked higher.
        """
        uid, moves = record.uid, self.states.moves
        now, now_us = self._clock.now(), self._clock.wall_us()
        cursor = state.cursor(part, now)
        cursor.take(want, state.unavailable(), self.states.due_seq(now_us), ranks, upto)
        await walk(self._store, uid, cursor)
        due_at = None
        if cursor.next_due is not None:
            due_at = now + max(0, cursor.next_due + EPOCH_US - now_us) / 1e6
        # Leased before they are read, so that a concurrent receive walking
        # the same stripes passes them by instead of reading them too; held in
        # hand while read, so that their leases cannot end before they are out.
        ids = state.leases.take(cursor.result, now, lease)
        if not ids:
            return [], due_at, cursor.held_back
        try:
            present = self._recent.take(uid, ids, now)
            if len(present) < len(ids):
                missing = [mid for mid in ids if mid not in present]
                for mid, rec in zip(missing, await self._store.get(uid, missing), strict=True):
                    if rec is not None:
                        present[mid] = rec
            # Gone meanwhile (deleted), or, when the slice moved during the read,
            # no longer this node's to lease: let go of them.
            moved = self.states.moves != moves
            kept = {
                mid: present[mid]
                for mid in ids
                if mid in present and (not moved or self.states.serves(mid))
            }
            got = await self.life.deliver(record, state, kept)
            if got and not self._awake():  # paused meanwhile: others may hand them out
                state.offer_again(sorted(m.id for m in got))
                got = []
        except BaseException:
            state.leases.release(ids)
            raise
        if len(got) < len(ids):
            state.leases.release(set(ids).difference(m.id for m in got))
        self._hand_out(record, state, got, now, lease)
        return got, due_at, cursor.held_back

    def _hand_out(
        self, record: QueueRecord, state: QueueState, got: list[Message], began: float, lease: float
    ) -> None:
        """Let go of the leases of ``got`` (taken in hand at ``began``): as taken, or,
        when the reads were slow (a store failing over, say), for a whole lease from
        now, journaled (a node taking over holds them as long)."""
        ids = [m.id for m in got]
        now = self._clock.now()
        if now - began <= SLOW_READ_SECONDS:
            state.leases.hand_out(ids, now)
            return
        state.leases.hand_out(ids, now, lease)
        self._journal(record, state, ids)
        log.info(
            "%s: reads took %.1f s: %d leases run from now", record.name, now - began, len(ids)
        )

    def _journal(self, record: QueueRecord, state: QueueState, ids: Sequence[int]) -> None:
        """Journal the leases of ``ids`` as they are now: a node taking over holds them
        as long."""
        if self.life.journal is not None:
            self.life.journal.note(record.uid, state, ids)

    # -- deleting and reading ------------------------------------------------

    async def delete(self, queue: str, ids: Sequence[int]) -> list[bool]:
        """Delete messages by id; per id, whether it existed."""
        record = self._catalog.queue(queue)
        existed = await self._store.delete(record.uid, ids)
        self._recent.discard(record.uid, ids)
        self._metrics.deleted(queue, sum(existed))
        self.states.activity.add(Event.DELETED, record.uid, sum(existed), self._clock.now())
        if (state := self.states.get(record.uid)) is not None:
            state.release(ids)
        return existed

    def release(self, queue: str, ids: Sequence[int]) -> None:
        """End the leases on ``ids`` (deleted through another node), and forget their
        records: a walk that read their keys before the delete must not find them."""
        uid = self._catalog.queue(queue).uid
        self._recent.discard(uid, ids)
        if state := self.states.get(uid):
            state.release(ids)

    def deliveries(self, queue: str, ids: Sequence[int]) -> list[int]:
        """Per id, the receive count this node last delivered it with (0: never, or deleted)."""
        state = self.states.get(self._catalog.queue(queue).uid)
        return state.delivery_counts(ids) if state is not None else [0] * len(ids)

    def published_elsewhere(self, queue: str, ids: Sequence[int]) -> None:
        """Let the walks meet ``ids``, stored in this node's slice through another node."""
        self.states.arrived(self._catalog.queue(queue).uid, ids)

    def peer_news(self, queue: str) -> None:
        """A peer stored messages of ``queue`` in its own slice: the receives of it waiting
        here return, for their callers to ask the peers."""
        record = self._catalog.find(queue)
        if record is not None and (state := self.states.get(record.uid)):
            state.peer_news()

    async def change_visibility(self, queue: str, ids: Sequence[int], seconds: float) -> list[int]:
        """Extend the live leases of ``ids`` by ``seconds`` from now, or end them (0).

        Returns the ids whose lease was live on this node; a message whose
        lease ended (or that was deleted) is not leased again by this call.
        Only a lease on an id this node serves now is extended: a node that
        stood down, or let the id go, is no longer the one whose leases (in
        memory or journaled) the others hold theirs by.
        A lease the consumer extended ends without a retry backoff; one ended
        with 0 gets the queue's backoff (extended before or not), and one
        ended after the message's last allowed receive goes to the dead letters.
        """
        record = self._catalog.queue(queue)
        state = self.states.of(record)
        now = self._clock.now()
        if seconds > 0:
            serves = self.states.serves
            live = state.leases.extend([i for i in ids if serves(i)], now, seconds)
            self._journal(record, state, live)
            if record.settings.retry_backoff is not None:
                state.nacked.update(live)
            return live
        live = state.leases.extend(ids, now, 0.0)  # a deadline of now ends them
        state.nacked.difference_update(live)
        await self.life.lapsed(record, state, state.leases.expire(now))
        state.notify()
        return live

    async def peek(self, queue: str, message_id: int) -> Message:
        """Return a message without leasing it, or raise ``MessageNotFound``."""
        record = self._catalog.queue(queue)
        (raw,) = await self._store.get(record.uid, [message_id])
        if raw is None:
            raise MessageNotFound(queue, message_id)
        return message(message_id, raw)

    async def peek_many(self, queue: str, count: int) -> list[Message]:
        """Return up to ``count`` of the oldest messages, leased or not, without leasing."""
        record = self._catalog.queue(queue)
        cursor = PartitionCursor(layout(0, ID_MAX, 1)[0], self._clock.now())
        cursor.take(count, ())
        await walk(self._store, record.uid, cursor)
        records = await self._store.get(record.uid, cursor.result)
        return [message(mid, raw) for mid, raw in zip(cursor.result, records, strict=True) if raw]

    async def stats(self, queue: str, detailed: bool = False) -> QueueStats:
        """Return the queue's depth (real count), leases in flight and partitions.

        With ``detailed``, also the age of its oldest message (one key read per
        stripe) and its rates.
        """
        record = self._catalog.queue(queue)
        if detailed:
            found = await held(self._store, record.uid, self.states.due_seq())
        else:
            found = Held(await self._store.count(record.uid), None, 0)
        state = self.states.get(record.uid)  # none made: asking is not using
        if state is None:  # not in use here: no leases, its first partitions
            partitions, in_flight = record.settings.min_partitions, 0
        else:
            partitions, in_flight = len(state.partitions.partitions), len(state.leases)
        if not detailed:
            return QueueStats(found.depth, partitions, LocalQueueStats(in_flight))
        here = self.states.local_stats(record.uid)
        return QueueStats(found.depth, partitions, here, found.oldest_age, found.delayed)

    def local_stats(self, names: Sequence[str]) -> dict[str, LocalQueueStats]:
        """Return what only this node knows of each queue, where it knows anything."""
        out: dict[str, LocalQueueStats] = {}
        for name in names:
            if (record := self._catalog.find(name)) is not None:
                here = self.states.local_stats(record.uid)
                if here != NOTHING_HERE:
                    out[name] = here
        return out

    # -- lifecycle -----------------------------------------------------------

    async def expire_due(self, budget: int = EXPIRY_BATCH) -> int:
        """Remove (or dead-letter) up to ``budget`` messages of this node's slice past
        their queue's retention or their time to live; return how many went."""
        return await self._expiry.run(budget)

    async def sweep(self) -> None:
        """Settle lapsed leases without waiting for a receive: dead letters and backoff
        holds move on time, and receive counts reach the store."""
        now = self._clock.now()
        for uid, state in self.states.items():
            if not state.leases:
                continue
            record = self._catalog.find(state.name)
            if record and record.uid == uid:
                await self.life.lapsed(record, state, state.leases.expire(now))
        if self.life.journal is not None:
            self.life.journal.tidy()

    async def sweep_loop(self) -> None:
        """Sweep every ``SWEEP_SECONDS`` until cancelled."""
        await every(SWEEP_SECONDS, self.sweep, "lease sweep")

    async def purge(self, queue: str, drop_at_ms: int) -> int:
        """Give a queue a new, empty bucket; return how many messages the old one held.

        The old bucket is dropped from ``drop_at_ms`` on (``Catalog.purge_queue``);
        its leases end here at once, so their deletes find nothing.
        """
        held = await self._store.count(self._catalog.queue(queue).uid)
        self.forget_dropped([await self._catalog.purge_queue(queue, drop_at_ms)])
        return held

    def forget_dropped(self, uids: Iterable[str]) -> None:
        """Drop the in-memory state of buckets no queue uses any more."""
        self.states.forget(uids)

    async def report(self) -> None:
        """Report the real depth and the messages in flight here of every queue this
        process has in memory or moved lately: an idle queue's levels do not move, or
        the process that moved them reports them."""
        for uid, (_, leases) in self.states.in_use().items():
            if (record := self._catalog.index.by_uid(uid)) is not None:
                self._metrics.queue_level(record.name, await self._store.count(uid), leases)

    def tidy(self) -> None:
        """Let go of recent records that are too old to be trusted (an upkeep round)."""
        self._recent.evict(self._clock.now())

    def close(self) -> None:
        """Wake every waiting receive so that it returns now; idempotent."""
        self._closing = True
        self.states.wake_all()
        if self.life.journal is not None:
            self.life.journal.close()
