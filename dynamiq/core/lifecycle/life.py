"""A message's life after its publish: receive counts, dead letters, backoff, expiry.

Counts: a message's receive count is stored in its record. A queue whose
decisions hang on it (``max_receives``, ``retry_backoff``) stores the raised
count at every delivery, before the message is handed out: one write per
receive batch, in the group commit of the node's other writes, so a crash, a
restart or a handoff loses no receive. Other queues hand a message out with
the stored count plus one and write nothing to the store then: the count is
written when the lease ends without a delete (a lapse or a release), goes
along when a lease is handed over, and is in the node's lease journal
(``journal``) meanwhile, so that a node killed while holding the lease
loses no receive. Every lease is journaled, with when it ends.

Dead letters: a message whose ``max_receives``-th lease ends without a
delete is moved into the queue's dead-letter queue under a new id, with its
body and metadata, its count started again and a ``DeadLetter`` note of where
it came from. A message found already at its limit when a receive reaches it
(its node died while it was leased) is moved instead of delivered.

Backoff: when the lease of a queue with ``retry_backoff`` lapses, the node
that held it keeps holding it for the backoff's delay before it is offered
again. The hold lives in that node's memory (like the lease it follows): a
node that dies while holding it lets the message be offered at once.

Groups: a message of an ordered group is handed out only while no other of
its group is in flight but those handed out with it (``groups``); one that
waits is not counted as received. A front member whose lease ends is read
first: deleted through a node whose word did not reach this one, its group
moves on then.

Expiry: a message past its ``ttl_seconds`` or its queue's
``retention_seconds`` is never delivered: a receive that reaches one removes
it (or dead-letters it, with ``dead_letter_on_expiry``) instead; the
background rounds of ``expiry`` do the same without a receive.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from dynamiq.core.context import EngineContext
from dynamiq.core.custody.journal import LeaseJournal, store_counts
from dynamiq.core.delivery.registry import QueueStates
from dynamiq.core.delivery.state import QueueState
from dynamiq.core.publish.attempts import placed
from dynamiq.core.records import (
    counted_to,
    delivered,
    message,
    meta_of,
    meta_of_message,
    new_life,
    with_meta,
)
from dynamiq.errors import DynamiqError, ServerError
from dynamiq.metrics.base import Metrics
from dynamiq.models import DeadLetter, DeadLetterReason, Message, QueueRecord, QueueSettings

__all__ = ["Lifecycle"]

log = logging.getLogger("dynamiq.core")


class Lifecycle:
    """What becomes of leased messages: counted, handed out, held back or moved on."""

    def __init__(
        self,
        context: EngineContext,
        metrics: Metrics,
        states: QueueStates,
        journal: LeaseJournal | None = None,
    ) -> None:
        self._store, self._catalog, self._clock = context
        self._metrics = metrics
        self._states = states  # fresh ids in this node's slice; who to tell of arrivals
        self.journal = journal  # counts handed out and not stored: a crash keeps them

    async def deliver(
        self, record: QueueRecord, state: QueueState, found: dict[int, bytes]
    ) -> list[Message]:
        """Count leased records as received and return their messages.

        Records already at their ``max_receives`` go to the dead-letter queue,
        expired ones are removed; neither is returned.
        """
        settings = record.settings
        now_ms = self._clock.wall_ms()
        if state.settling:
            found = _settled(found, state.settling)
        messages = [delivered(mid, raw, now_ms) for mid, raw in found.items()]
        counted, dead, expired = _sort(settings, messages, now_ms)
        if dead:
            await self.dead_letter(
                record, state, [(m.id, found[m.id]) for m in dead], "max_receives"
            )
        if expired:
            await self.expire(record, state, [(m.id, found[m.id]) for m in expired])
        if state.groups or any(m.group is not None for m in counted):
            counted, held = state.groups.admit(counted, state.leases)
            if held:
                await self._check_heads(record, state, held)
            if log.isEnabledFor(logging.DEBUG):
                heads = [(m.group, m.id) for m in counted if m.group is not None]
                log.debug("%s: group heads handed out %s, %d held", record.name, heads, len(held))
        if counted and settings.counts_receives:  # decisions hang on the count: stored first
            rows = [(m.id, with_meta(found[m.id], meta_of_message(m))) for m in counted]
            stored = await self._store.replace(record.uid, rows)
            counted = [m for m, ok in zip(counted, stored, strict=True) if ok]
        counts = state.counts
        for m in counted:
            counts[m.id] = (m.receive_count, m.first_received_ms)
        if counted and self.journal is not None:
            self.journal.note(record.uid, state, [m.id for m in counted])
        return counted

    async def _check_heads(
        self, record: QueueRecord, state: QueueState, held: Sequence[Message]
    ) -> None:
        """Let groups move on whose front is gone without this node seeing it go (deleted
        through a process that did not hold its lease, or a lease another node made):
        a front member not leased here, or leased by another node, is read, and
        released when it is not there."""
        groups, leases = state.groups, state.leases
        heads = {
            h for m in held for h in groups.front_of(m) if h not in leases or groups.foreign(h)
        }
        await self._release_gone(record, state, heads)

    async def _release_gone(
        self, record: QueueRecord, state: QueueState, heads: Iterable[int]
    ) -> set[int]:
        """Read group heads; release those gone (their groups move on), and return them."""
        ids = sorted(heads)
        if not ids:
            return set()
        records = await self._store.get(record.uid, ids)
        gone = [h for h, raw in zip(ids, records, strict=True) if raw is None]
        if gone:
            log.debug("%s: group heads found gone %s", record.name, gone)
        state.release(gone)
        return set(gone)

    async def lapsed(self, record: QueueRecord, state: QueueState, ids: list[int]) -> None:
        """Decide what becomes of messages whose lease ended without a delete.

        Per the count the message was delivered with: the dead-letter queue
        after its last allowed receive; else a hold of the backoff's delay
        (unless the consumer set the delay itself); else offered again at once,
        its count stored after where the delivery did not store it (a delivery
        meanwhile counts on from it).
        """
        if not ids:
            return
        if state.groups:
            # A head deleted through a node whose word did not reach this one (its
            # view of the owner was a moment old): gone, its group moves on now,
            # or the messages waiting behind it would wait for good.
            heads = (mid for mid in ids if state.groups.group_of(mid) is not None)
            if gone := await self._release_gone(record, state, heads):
                ids = [mid for mid in ids if mid not in gone]
        settings = record.settings
        ended = [(mid, state.counts.pop(mid, None)) for mid in ids]
        if not settings.counts_receives:
            self._offer_again(state, ids)
            await self._store_counts(record, state, [(mid, c) for mid, c in ended if c is not None])
            return
        now, limit, backoff = self._clock.now(), settings.max_receives, settings.retry_backoff
        dead: list[int] = []
        again: list[int] = []
        for mid, counted in ended:
            if counted is None:  # a hold ended, or a lease handed over without its count
                again.append(mid)
            elif limit is not None and counted[0] >= limit:
                dead.append(mid)
            elif backoff is not None and mid not in state.nacked:
                state.leases.acquire((mid,), now, backoff.delay(counted[0]))
            else:
                again.append(mid)
        state.nacked.difference_update(ids)
        if dead:
            state.leases.acquire(dead, now, settings.visibility_timeout)  # held while moved
            records = await self._store.get(record.uid, dead)
            found = [(mid, raw) for mid, raw in zip(dead, records, strict=True) if raw is not None]
            state.release([mid for mid, raw in zip(dead, records, strict=True) if raw is None])
            await self.dead_letter(record, state, found, "max_receives")
        self._offer_again(state, again)

    def _offer_again(self, state: QueueState, ids: list[int]) -> None:
        """Offer again messages whose lease ended, those this node still serves."""
        state.expired([mid for mid in ids if self._states.serves(mid)])

    async def _store_counts(
        self, record: QueueRecord, state: QueueState, ended: list[tuple[int, tuple[int, int]]]
    ) -> None:
        """Write the counts deliveries did not store, now that their leases ended."""
        if not ended:
            return
        settling = state.settling
        settling.update(ended)
        try:
            await store_counts(self._store, record.uid, [(m, c, f) for m, (c, f) in ended])
        except DynamiqError as exc:  # offered again all the same: a count may fall short
            log.warning("could not store the receive counts of %s: %s", record.name, exc)
        finally:
            for mid, counted in ended:
                if settling.get(mid) is counted:
                    del settling[mid]

    async def dead_letter(
        self,
        source: QueueRecord,
        state: QueueState,
        items: Sequence[tuple[int, bytes]],
        reason: DeadLetterReason,
    ) -> int:
        """Move ``(id, record)`` items into ``source``'s dead-letter queue; return how
        many moved (one deleted meanwhile is not).

        One that cannot be moved now (the store failed) is moved when a
        receive next reaches it.
        """
        try:
            moved = await self._move(source, items, reason)
        except DynamiqError as exc:
            log.warning("could not dead-letter %d messages of %s: %s", len(items), source.name, exc)
            return 0
        state.release(moved)
        self.note(source, state, "dead_lettered", len(moved))
        return len(moved)

    async def expire(
        self, record: QueueRecord, state: QueueState, items: Sequence[tuple[int, bytes]]
    ) -> None:
        """Remove expired messages, or dead-letter them when the queue asks for that."""
        if record.settings.dead_letter_on_expiry:
            gone = await self.dead_letter(record, state, items, "expired")
        else:
            ids = [mid for mid, _ in items]
            gone = sum(await self._store.delete(record.uid, ids))
            state.release(ids)
        self.note(record, state, "expired", gone)

    def note(self, record: QueueRecord, state: QueueState, event: str, count: int) -> None:
        """Count ``count`` messages of a queue that took a lifecycle step, here and in
        the metrics (``LIFECYCLE_EVENTS``)."""
        if count:
            state.moved_on[event] += count
            self._metrics.lifecycle(record.name, event, count)

    async def _move(
        self, source: QueueRecord, items: Sequence[tuple[int, bytes]], reason: DeadLetterReason
    ) -> list[int]:
        """Move messages into the dead-letter queue; return the ids moved.

        A message keeps its id there first: two nodes moving the same message
        at once (one took over the other's slice) meet on that key, and the
        second finishes the first's move instead of making a copy. Only a key
        taken by another message makes it draw a fresh id.
        """
        target = self._catalog.queue(source.settings.dead_letter_queue or "")
        now_ms = self._clock.wall_ms()
        rows = {mid: _dead(raw, source.name, reason, now_ms) for mid, raw in items}
        moved: list[int] = []

        async def attempt(todo: list[tuple[int, int]], n: int) -> list[tuple[int, int]]:
            if n:  # the keys met others' messages: fresh ones
                todo = list(
                    zip((mid for mid, _ in todo), self._states.new_ids(len(todo)), strict=True)
                )
            done = await self._store.move(
                [(source.uid, mid, target.uid, key, rows[mid]) for mid, key in todo]
            )
            moved.extend(mid for (mid, _), ok in zip(todo, done, strict=True) if ok)
            self._states.arrived(
                target.uid, [key for (_, key), ok in zip(todo, done, strict=True) if ok]
            )
            taken = [pair for pair, ok in zip(todo, done, strict=True) if ok is None]
            if not taken:
                return []
            held = await self._store.get(target.uid, [key for _, key in taken])
            ours = [
                mid
                for (mid, _), raw in zip(taken, held, strict=True)
                if raw is not None and _same(raw, rows[mid])
            ]
            if ours:  # already moved by another node: finish its move
                gone = await self._store.delete(source.uid, ours)
                moved.extend(mid for mid, ok in zip(ours, gone, strict=True) if ok)
            return [pair for pair in taken if pair[0] not in ours]

        if await placed([(mid, mid) for mid in rows], attempt):
            raise ServerError("found no free ids in the dead-letter queue; retry")
        return moved


def _settled(found: dict[int, bytes], settling: dict[int, tuple[int, int]]) -> dict[int, bytes]:
    """``found`` with the counts on their way to the store in place of those read."""
    out = dict(found)
    for mid, raw in found.items():
        if (counted := settling.get(mid)) is not None:
            out[mid] = counted_to(raw, *counted) or raw
    return out


def _sort(
    settings: QueueSettings, messages: list[Message], now_ms: int
) -> tuple[list[Message], list[Message], list[Message]]:
    """Split messages as a delivery would hand them out into those to deliver, those
    already at their receive limit before it, and those expired."""
    undecided = settings.max_receives is None and settings.retention_seconds is None
    if undecided and not any(m.expires_ms for m in messages):  # the usual case
        return messages, [], []
    counted: list[Message] = []
    dead: list[Message] = []
    expired: list[Message] = []
    limit = settings.max_receives
    retention = settings.retention_seconds
    born_after = -1 if retention is None else now_ms - retention * 1000
    for m in messages:
        if (m.expires_ms and m.expires_ms <= now_ms) or m.published_ms <= born_after:
            expired.append(m)
        elif limit is not None and m.receive_count > limit:
            dead.append(m)
        else:
            counted.append(m)
    return counted, dead, expired


def _same(stored: bytes, ours: bytes) -> bool:
    """Whether a dead-letter queue's record is this message's (moved by another node)."""
    a, b = message(0, stored), message(0, ours)
    note_a, note_b = a.dead_letter, b.dead_letter
    same_source = (note_a.source_queue if note_a else None) == (
        note_b.source_queue if note_b else None
    )
    return a.body == b.body and a.published_ms == b.published_ms and same_source


def _dead(raw: bytes, source: str, reason: DeadLetterReason, now_ms: int) -> bytes:
    """The record a message gets in a dead-letter queue: a new life, and its origin."""
    _, meta = meta_of(raw)
    note = DeadLetter(source, reason, meta.receive_count, now_ms)
    return with_meta(raw, new_life(meta, dead_letter=note))
