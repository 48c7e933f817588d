"""Wide fan-outs, copied behind the answer.

A topic publish stores its copies in the subscribed queues in the publish's
own commit, so a receive that follows the answer finds them. A message for
more than ``limits.syncfanout`` queues is stored once instead, in one commit
(in ``SPREADS``, under the id every copy of it will have), and the publish is
answered. This process's spreader gathers what is published within
``GATHER_SECONDS``, copies it into its queues ``CHUNK`` copies a commit (every
queue's copies of the gathered messages in the same commit, so its pages are
written once for all of them; a publish's own commit goes before the next
chunk; while wide publishes keep coming, ``BUSY_CHUNK`` a commit, so that
theirs wait less; one chunk readied while the last commits), and deletes
it. As with SNS, whose deliveries to SQS queues are asynchronous too, each
copy arrives shortly after the answer. The answer
still means every copy will arrive: the stored message survives ``kill -9``,
and whoever serves its id finishes the copying (this process, after a
restart; another, after the slice moved: each looks for the spreads in its
slice every ``FIND_SECONDS``).

Copies never overwrite. One found already with the same value was made
before a restart (a copy deleted in between is made again: at least once); a
different value there means another process took the id, and the copy gets
a fresh one. A queue deleted meanwhile gets nothing; one made again under its
name gets the copy, as SNS delivers to a queue by its name.

Only copies that need nothing worked out per queue are spread: no delay,
expiry, group or dedup id of their own, into queues without a delay, content
dedup, ``max_depth`` or FIFO order. The others are stored in the publish's
commit as before.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import math
import struct
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import NamedTuple

from dynamiq.core.publish.attempts import placed
from dynamiq.core.publish.outgoing import by_bucket, outgoing_rows
from dynamiq.core.queues import QueueService
from dynamiq.core.rounds import every
from dynamiq.errors import ServerError
from dynamiq.models import Outgoing, QueueRecord, QueueSettings

__all__ = ["SPREADS", "Spread", "Spreader", "spread_message", "spread_settings"]

log = logging.getLogger("dynamiq.core")

# Not a queue's bucket: those are named by 16 hex digits.
SPREADS = "topic-spreads"
SYNC_FANOUT = 1000  # copies of a message stored in its publish's commit, at most
CHUNK = 6_000  # copies a commit
BUSY_CHUNK = 1_500  # while wide publishes arrive: a publish's commit waits for one, at most
IN_FLIGHT = 2  # chunks being copied at once: one readied while another commits
BATCH_COPIES = 100_000  # copies of the spreads copied together, at most
HELD_COPIES = 1_000_000  # copies owed by this process; beyond, a wide publish waits
FIND_SECONDS = 1.0
GATHER_SECONDS = 0.5  # what is published meanwhile is copied with it
FIND_LIMIT = 64  # spreads taken up from the store at once
DONE_KEPT = 1024  # ids of finished spreads remembered (a scan read before they went)

_HEAD = struct.Struct(">BH")  # format, how many values
_LENGTH = struct.Struct(">I")
_FORMAT = 1

Row = tuple[str, int, bytes]  # a copy: its queue (name or bucket), its id, its record
Landed = Callable[[Mapping[str, Sequence[int | None]]], Awaitable[None]]


async def _nobody(_: Mapping[str, Sequence[int | None]]) -> None:
    return None


def spread_settings(settings: QueueSettings) -> bool:
    """Whether a queue with ``settings`` may take its copies behind the answer."""
    return not (
        settings.delay_seconds
        or settings.content_dedup
        or settings.fifo
        or settings.max_depth is not None
    )


def spread_message(m: bytes | Outgoing) -> bool:
    """Whether ``m``'s copies may be made behind the answer: it asks for nothing that is
    worked out per copy at publish time."""
    return isinstance(m, bytes) or (
        not m.delay_seconds
        and m.ttl_seconds is None
        and m.dedup_id is None
        and m.group is None
        and m.tenant is None
    )


class Spread(NamedTuple):
    """One message's copies to make: their records (``values``: a message stored plain
    and compressed, or in an SNS envelope, has one each), the queues they go to
    (by name), and per queue its record's index in ``values`` (``at``; empty when
    there is one value)."""

    values: list[bytes]
    queues: list[str]
    at: list[int]

    @classmethod
    def of(cls, items: Sequence[tuple[QueueRecord, bytes | Outgoing]], now_us: int) -> Spread:
        """The spread of ``items`` (a queue and its copy, each message encoded once)."""
        values: list[bytes] = []
        at: list[int] = []
        index: dict[tuple[int, bool], int] = {}
        for record, m in items:
            key = (id(m), record.settings.compressed_messages)
            found = index.get(key)
            if found is None:
                found = index[key] = len(values)
                values.append(outgoing_rows([(record, m)], now_us).rows[0][1])
            at.append(found)
        return cls(values, [record.name for record, _ in items], at if len(values) > 1 else [])

    def sort(self) -> Spread:
        """The same spread, its queues in order (as a topic routes them: at no cost)."""
        if not self.at:
            self.queues.sort()
            return self
        pairs = sorted(zip(self.queues, self.at, strict=True))
        return Spread(self.values, [q for q, _ in pairs], [a for _, a in pairs])

    def encode(self) -> bytes:
        """The spread as stored: its values, then a line per queue ("name", or
        "name<TAB>index" where there are several values)."""
        parts = [_HEAD.pack(_FORMAT, len(self.values))]
        for value in self.values:
            parts += [_LENGTH.pack(len(value)), value]
        if self.at:
            lines = (f"{q}\t{a}" for q, a in zip(self.queues, self.at, strict=True))
            parts.append("\n".join(lines).encode())
        else:
            parts.append("\n".join(self.queues).encode())
        return b"".join(parts)

    @classmethod
    def decode(cls, raw: bytes) -> Spread:
        """Read a stored spread; ``ValueError`` if this release cannot."""
        form, count = _HEAD.unpack_from(raw)
        if form != _FORMAT:
            raise ValueError(f"a spread of format {form}")
        at, values = _HEAD.size, []
        for _ in range(count):
            (size,) = _LENGTH.unpack_from(raw, at)
            values.append(raw[at + _LENGTH.size : at + _LENGTH.size + size])
            at += _LENGTH.size + size
        lines = raw[at:].decode().split("\n") if len(raw) > at else []
        if count == 1:
            return cls(values, lines, [])
        pairs = [line.partition("\t") for line in lines]
        return cls(values, [q for q, _, _ in pairs], [int(a) for _, _, a in pairs])


def chunks(batch: Sequence[tuple[int, Spread]], size: int) -> Iterator[list[Row]]:
    """The copies of the spreads ``batch`` (each by id, its queues sorted), about ``size``
    at a time, every copy into one queue in the same chunk: a queue's pages are
    written once for all of them."""
    total = sum(len(spread.queues) for _, spread in batch)
    if not total:
        return
    count = -(-total // size)
    widest = max((spread.queues for _, spread in batch), key=len)
    bounds: list[str | None] = [widest[len(widest) * k // count] for k in range(1, count)]
    starts = [0] * len(batch)
    for bound in [*bounds, None]:
        rows: list[Row] = []
        for n, (mid, (values, queues, at)) in enumerate(batch):
            end = len(queues) if bound is None else bisect.bisect_left(queues, bound)
            if at:
                picked = zip(queues[starts[n] : end], at[starts[n] : end], strict=True)
                rows += [(queue, mid, values[a]) for queue, a in picked]
            else:
                value = values[0]
                rows += [(queue, mid, value) for queue in queues[starts[n] : end]]
            starts[n] = end
        if rows:
            yield rows


class Spreader:
    """Stores wide fan-outs once and copies them into their queues behind the answer."""

    def __init__(self, queues: QueueService, widest: int = SYNC_FANOUT) -> None:
        self._store, self._catalog, self._clock = queues.context
        self._queues = queues
        self.widest = widest  # copies of a message made in its publish's commit, at most
        self._held: dict[int, Spread] = {}  # by id, oldest first: this process copies them
        self._done: dict[int, None] = {}  # the last finished, oldest first
        self._owed = 0  # copies the held spreads owe
        self._kicked = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._stored_at = -math.inf  # when the last spread was stored (``Clock.now``)
        self._storing = 0  # spreads being stored: the copying lets their commits go first
        self._quiet = asyncio.Event()
        self._quiet.set()
        self.landed: Landed = _nobody  # told of copies made: per queue, their ids

    @property
    def owed(self) -> int:
        """Copies this process has still to make."""
        return self._owed

    async def hold(self, items: Sequence[tuple[QueueRecord, bytes | Outgoing]]) -> int:
        """Store one message's copies into ``items``' queues as one spread (``store``)."""
        return await self.store(Spread.of(items, self._clock.wall_us()))

    async def broadcast(
        self,
        queues: Sequence[str],
        alike: QueueRecord | None,
        records: Mapping[str, QueueRecord],
        m: bytes | Outgoing,
    ) -> int:
        """Store ``m``'s copies into ``queues`` (their ``records``) as one spread; where
        every queue stores it alike (``alike``: one of them), as one value."""
        if alike is None:
            return await self.hold([(records[q], m) for q in queues])
        value = outgoing_rows([(alike, m)], self._clock.wall_us()).rows[0][1]
        return await self.store(Spread([value], list(queues), []))

    async def store(self, spread: Spread) -> int:
        """Store ``spread`` (one commit); return the id every copy of it will have. Waits
        while this process owes ``HELD_COPIES`` copies already."""
        while self._owed >= HELD_COPIES:
            self._room.clear()
            await self._room.wait()
        raw = spread.encode()
        states, got = self._queues.states, [0]

        async def attempt(todo: list[bytes], _: int) -> list[bytes]:
            got[0] = states.ids.many(1, states.stripes)[0]
            (stored,) = await self._store.insert([(SPREADS, got[0], raw)])
            return [] if stored else todo

        self._storing += 1
        self._quiet.clear()
        try:
            if await placed([raw], attempt):
                raise ServerError("found no free id for a wide fan-out; nothing is stored, retry")
        finally:
            self._storing -= 1
            if not self._storing:
                self._quiet.set()
        self._take(got[0], spread)
        self._stored_at = self._clock.now()
        return got[0]

    async def spread_loop(self) -> None:
        """Copy the spreads held here; look for the others of this process's slice (a
        past life's, a slice gained) every ``FIND_SECONDS``. Runs until cancelled."""
        await every(FIND_SECONDS, self._round, "copying wide fan-outs", self._kicked)

    async def _round(self) -> None:
        await self.find()
        if 0 < self._owed < BATCH_COPIES:  # let more come: copied together
            await asyncio.sleep(GATHER_SECONDS)
        await self.copy_held()

    def _take(self, mid: int, spread: Spread) -> None:
        if mid not in self._held and mid not in self._done:
            self._held[mid] = spread
            self._owed += len(spread.queues)
            self._kicked.set()

    def _let_go(self, mid: int, done: bool) -> None:
        self._owed -= len(self._held.pop(mid).queues)
        if done:
            self._done[mid] = None
            if len(self._done) > DONE_KEPT:
                del self._done[next(iter(self._done))]
        if self._owed < HELD_COPIES:
            self._room.set()

    async def find(self) -> None:
        """Hold the spreads of this process's slice that it does not hold yet."""
        keyspace = self._queues.keyspace
        if keyspace is None:
            return
        (found,) = await self._store.scan(SPREADS, [keyspace], FIND_LIMIT)
        new = [mid for mid in found if mid not in self._held and mid not in self._done]
        if not new:
            return
        for mid, raw in zip(new, await self._store.get(SPREADS, new), strict=True):
            if raw is None:
                continue
            try:
                spread = Spread.decode(raw)
            except ValueError as exc:  # a later release's: left for it
                log.error("wide fan-out %d left as it is: %s", mid, exc)
                self._done[mid] = None
                continue
            self._take(mid, spread)

    async def copy_held(self) -> None:
        """Copy every spread held here into its queues; delete each once copied."""
        while self._held:
            batch: list[tuple[int, Spread]] = []
            owed = 0
            for mid, spread in list(self._held.items()):
                if not self._queues.serves(mid):  # its slice moved: the new owner copies it
                    self._let_go(mid, done=False)
                elif owed < BATCH_COPIES:
                    batch.append((mid, spread.sort()))  # see ``chunks``
                    owed += len(spread.queues)
            busy = self._clock.now() - self._stored_at < 2 * GATHER_SECONDS
            await self._copy_chunks(chunks(batch, BUSY_CHUNK if busy else CHUNK))
            if batch:
                await self._store.delete(SPREADS, [mid for mid, _ in batch])
            for mid, _ in batch:
                self._let_go(mid, done=True)

    async def _copy_chunks(self, todo: Iterator[list[Row]]) -> None:
        """Copy every chunk of ``todo``, the next readied while one is being committed
        (``IN_FLIGHT`` at once)."""
        copying: list[asyncio.Task[None]] = []
        try:
            for rows in todo:
                await self._quiet.wait()  # a publish's commit waits for the chunks in flight
                copying.append(asyncio.create_task(self._copy(rows)))
                if len(copying) >= IN_FLIGHT:
                    await copying.pop(0)
            while copying:
                await copying.pop(0)
        finally:
            for task in copying:  # a chunk failed: the others' outcome is not awaited
                task.cancel()
            if copying:
                await asyncio.gather(*copying, return_exceptions=True)

    async def _copy(self, rows: list[Row]) -> None:
        """Store copies (``rows`` by queue name; those whose queue is still there) and
        tell who waits for them."""
        find = self._catalog.index.get
        queues: dict[str, QueueRecord] = {}  # by bucket
        live: list[Row] = []
        for name, mid, value in rows:
            if (record := find(name)) is not None:
                queues[record.uid] = record
                live.append((record.uid, mid, value))
        stored = await self._store.insert(live)
        made = [row for row, ok in zip(live, stored, strict=True) if ok]
        if not all(stored):
            made += await self._again([row for row, ok in zip(live, stored, strict=True) if not ok])
        per_queue = by_bucket([(uid, value) for uid, _, value in made], [mid for _, mid, _ in made])
        woke = self._queues.landed(queues, per_queue)
        await self.landed({queues[uid].name: mids for uid, (mids, _) in per_queue.items()})
        if woke:  # the receives it woke answer first, as after a publish
            await asyncio.sleep(0)

    async def _again(self, rows: list[Row]) -> list[Row]:
        """Copies whose id their queue holds already: made before (the same value: left
        as they are), or under an id another process took (stored under a fresh one)."""
        taken: list[Row] = []
        for uid, mid, value in rows:
            (there,) = await self._store.get(uid, [mid])
            if there != value:
                taken.append((uid, mid, value))
        made: list[Row] = []
        states = self._queues.states

        async def attempt(todo: list[Row], _: int) -> list[Row]:
            fresh = states.ids.many(len(todo), states.stripes)
            again = [(uid, mid, value) for (uid, _, value), mid in zip(todo, fresh, strict=True)]
            stored = await self._store.insert(again)
            made.extend(row for row, ok in zip(again, stored, strict=True) if ok)
            return [row for row, ok in zip(todo, stored, strict=True) if not ok]

        lost = await placed(taken, attempt)
        for uid, mid, _ in made:
            log.warning("a wide fan-out's copy in bucket %s is %d: its id was taken", uid, mid)
        if lost:
            raise ServerError(f"found no free ids for {len(lost)} copies of a wide fan-out")
        return made
