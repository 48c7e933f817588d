"""Partitions of a node's slice, the least-recently-used choice, and the stripe merge (pure).

A partition is a contiguous id range made of whole stripes (clipped to the
node's slice). A queue has between ``min_partitions`` and ``max_partitions`` of
them on each node: one more is opened when a receive finds every partition busy
serving another receive, and partitions idle for ``max_partition_age`` seconds
are retired down to the minimum. A receive takes the least-recently-used
partition that is not known to be empty.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass

from dynamiq.core.ids import SEQ_MASK, STRIPE_BITS, seq_of, stripe_of, stripe_range
from dynamiq.models import QueueSettings

__all__ = [
    "CURSOR_SECONDS",
    "EMPTY_HINT_SECONDS",
    "Partition",
    "PartitionCursor",
    "PartitionSet",
    "layout",
]

# How long a partition found empty is skipped unless a local publish or an
# expired lease says otherwise. Bounds how late a publish through another
# process is noticed.
EMPTY_HINT_SECONDS = 1.0

# A cursor is replaced by a fresh walk this often, to see what it cannot be
# told about (publishes through other processes sharing the store).
CURSOR_SECONDS = 1.0
# Keys read per lane refill: the first read is small (most stripes hold few
# visible messages), then doubles while the lane keeps yielding.
LANE_READ_MIN = 4
LANE_READ_MAX = 256

KeyRange = tuple[int, int]
_END = (1 << 64, 0)  # after every (seq, id)


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition: its id bounds (inclusive) and one scan range per stripe."""

    index: int
    generation: int
    lo: int
    hi: int
    ranges: tuple[KeyRange, ...]

    def __contains__(self, message_id: object) -> bool:
        return isinstance(message_id, int) and self.lo <= message_id <= self.hi


def layout(lo: int, hi: int, count: int, generation: int = 0) -> tuple[Partition, ...]:
    """Split ``[lo, hi]`` into at most ``count`` partitions of whole stripes."""
    first, last = stripe_of(lo), stripe_of(hi)
    stripes = last - first + 1
    count = max(1, min(count, stripes))
    parts: list[Partition] = []
    for index in range(count):
        begin = first + stripes * index // count
        end = first + stripes * (index + 1) // count  # exclusive
        ranges = tuple(
            (max(lo, stripe_range(s)[0]), min(hi, stripe_range(s)[1])) for s in range(begin, end)
        )
        parts.append(Partition(index, generation, ranges[0][0], ranges[-1][1], ranges))
    return tuple(parts)


class PartitionSet:
    """The partitions of one queue on one node, with their use times and hints."""

    def __init__(self, lo: int, hi: int, settings: QueueSettings, now: float) -> None:
        self._lo, self._hi = lo, hi
        self._settings = settings
        self._generation = 0
        self._relayout(settings.min_partitions, now)

    @property
    def partitions(self) -> tuple[Partition, ...]:
        """Return the current partitions."""
        return self._parts

    def configure(self, settings: QueueSettings, now: float) -> None:
        """Apply new settings, clamping the partition count into the new bounds."""
        self._settings = settings
        count = min(max(len(self._parts), settings.min_partitions), settings.max_partitions)
        if count != len(self._parts):
            self._relayout(count, now)

    def set_slice(self, lo: int, hi: int, now: float) -> None:
        """Move to a new slice of the keyspace (membership changed)."""
        if (lo, hi) != (self._lo, self._hi):
            self._lo, self._hi = lo, hi
            self._relayout(len(self._parts), now)

    def acquire(self, now: float, skip: Container[int] = ()) -> Partition | None:
        """Take the least-recently-used free partition that may hold messages.

        Opens a new partition when every partition is busy and the maximum
        allows it; returns None when nothing is worth scanning.
        """
        self._retire(now)
        free = [
            i
            for i in range(len(self._parts))
            if i not in skip and not self._busy[i] and self._empty_until[i] <= now
        ]
        if not free:
            if all(self._busy) and len(self._parts) < self._max_count():
                self._relayout(len(self._parts) + 1, now, grown=True)
                free = [len(self._parts) - 1]
            else:
                return None
        index = min(free, key=self._last_used.__getitem__)
        self._busy[index] += 1
        return self._parts[index]

    def release(self, part: Partition, now: float, found: bool) -> None:
        """Give back a partition after a receive; ``found`` says it had messages."""
        i = part.index
        if i >= len(self._parts):
            return
        self._busy[i] = max(0, self._busy[i] - 1)
        self._last_used[i] = now
        if part.generation == self._generation:  # else its ranges changed: no hint
            self._empty_until[i] = 0.0 if found else now + EMPTY_HINT_SECONDS

    def wake(self, ids: Iterable[int] | None = None) -> None:
        """Forget empty hints: for the partitions holding ``ids``, or all."""
        if ids is None:
            self._empty_until = [0.0] * len(self._parts)
            return
        first, owner = stripe_of(self._parts[0].lo), self._owner
        for stripe in {stripe_of(message_id) for message_id in ids}:
            if 0 <= stripe - first < len(owner):
                self._empty_until[owner[stripe - first]] = 0.0

    def _max_count(self) -> int:
        return min(self._settings.max_partitions, stripe_of(self._hi) - stripe_of(self._lo) + 1)

    def _retire(self, now: float) -> None:
        minimum = self._settings.min_partitions
        if len(self._parts) <= minimum:
            return
        age = self._settings.max_partition_age
        idle = sum(1 for i, t in enumerate(self._last_used) if now - t >= age and not self._busy[i])
        if idle:
            self._relayout(max(minimum, len(self._parts) - idle), now)

    def _relayout(self, count: int, now: float, grown: bool = False) -> None:
        old_busy = list(getattr(self, "_busy", []))
        old_used = list(getattr(self, "_last_used", []))
        self._generation += 1
        self._parts = layout(self._lo, self._hi, count, self._generation)
        n = len(self._parts)
        self._owner = [p.index for p in self._parts for _ in p.ranges]  # stripe -> partition
        # Receives in progress keep their partition by index: busy counts carry
        # over (a retired index is simply dropped). A grown partition is new,
        # so it is the least recently used.
        self._busy = (old_busy + [0] * n)[:n]
        self._last_used = (old_used + [now] * n)[:n]
        self._empty_until = [0.0] * n
        if grown:
            self._last_used[n - 1] = -math.inf


class _Lane:
    __slots__ = ("buf", "exhausted", "hi", "limit", "next_lo")

    def __init__(self, lo: int, hi: int) -> None:
        self.buf: deque[int] = deque()
        self.next_lo, self.hi = lo, hi
        self.limit = LANE_READ_MIN
        self.exhausted = False


class PartitionCursor:
    """Where a partition's oldest-first walk stands, kept from one receive to the next.

    Each range of the partition lies in one stripe, where id order is age
    order, so the cursor keeps one lane per range: a buffer of the next keys,
    read by range scans, and a heap of the lanes' heads. ``take`` runs the
    merge: call ``take(want, skip)``, then ``requests()`` for the scans it
    needs and ``feed()`` their results until ``requests()`` is empty;
    ``result`` is then the oldest ``want`` ids not in ``skip``. A lane that
    runs dry is refilled before anything else is taken, since its next key
    may be the oldest.

    Ids handed out leave the cursor; those whose lease ends come back through
    ``offer_again``. Publishes through this node are appended to lanes read
    to their end (``touch``), so a queue that keeps up needs no scan at all.
    Anything else (another process publishing, a receive that failed after
    taking ids) is caught up by replacing the cursor with a
    fresh one, which the caller does every ``CURSOR_SECONDS``.
    """

    def __init__(self, part: Partition, born: float) -> None:
        self.part = part
        self.born = born
        self._first_stripe = stripe_of(part.lo)
        self._lanes = [_Lane(lo, hi) for lo, hi in part.ranges]
        self._hungry = set(range(len(self._lanes)))
        self._heads: list[tuple[int, int, int]] = []  # (seq, id, lane)
        self._again: list[tuple[int, int]] = []  # (seq, id): leases that ended
        self._skip: Container[int] = ()
        self._want = 0
        self._taken: set[int] = set()
        self.result: list[int] = []

    def take(self, want: int, skip: Container[int]) -> None:
        """Start looking for the ``want`` oldest ids that are not in ``skip``."""
        self._want, self._skip = want, skip
        self.result = []
        self._taken = set()

    def requests(self) -> list[tuple[int, int, int, int]]:
        """Advance the merge; return ``(lane, lo, hi, limit)`` scans still needed."""
        heads, again = self._heads, self._again
        while len(self.result) < self._want and not self._hungry and (heads or again):
            if again and (not heads or again[0] < heads[0][:2]):
                self._emit(heapq.heappop(again)[1])
                continue
            index = heapq.heappop(heads)[2]
            self._take_run(index, min(heads[0][:2] if heads else _END, again[0] if again else _END))
            self._push_head(index)
        if len(self.result) >= self._want:
            return []
        lanes = self._lanes
        return [(i, lanes[i].next_lo, lanes[i].hi, lanes[i].limit) for i in sorted(self._hungry)]

    def _take_run(self, index: int, bound: tuple[int, int]) -> None:
        # A published batch sits in one stripe: take the lane's keys while they
        # are older than every other lane's head, not one heap operation each.
        buf, want, emit = self._lanes[index].buf, self._want, self._emit
        emit(buf.popleft())
        while buf and len(self.result) < want and (buf[0] & SEQ_MASK, buf[0]) < bound:
            emit(buf.popleft())

    def _emit(self, message_id: int) -> None:
        if message_id not in self._skip and message_id not in self._taken:
            self._taken.add(message_id)
            self.result.append(message_id)

    def feed(self, lane_index: int, keys: Sequence[int]) -> None:
        """Hand the cursor the ascending keys one requested scan returned."""
        lane = self._lanes[lane_index]
        lane.buf.extend(keys)
        lane.exhausted = len(keys) < lane.limit
        if keys:
            lane.next_lo = keys[-1] + 1
        lane.limit = min(lane.limit * 2, LANE_READ_MAX)
        self._hungry.discard(lane_index)
        self._push_head(lane_index)

    def offer_again(self, ids: Iterable[int]) -> None:
        """Offer ids whose lease ended (they were handed out before)."""
        for message_id in ids:
            if message_id in self.part:
                heapq.heappush(self._again, (seq_of(message_id), message_id))

    def touch(self, ids: Sequence[int]) -> None:
        """Note ids just published into this partition; ``ids`` must be ascending."""
        part = self.part
        if ids and stripe_of(ids[0]) == stripe_of(ids[-1]) and ids[0] in part and ids[-1] in part:
            # One batch (ascending, so every id between lies in the same stripe).
            self._touch_lane(stripe_of(ids[0]) - self._first_stripe, ids)
            return
        for message_id in ids:
            if message_id in self.part:
                self._touch_lane(stripe_of(message_id) - self._first_stripe, (message_id,))

    def _touch_lane(self, index: int, ids: Sequence[int]) -> None:
        lane = self._lanes[index]
        if ids[0] < lane.next_lo:  # behind the walk: offer them directly
            for message_id in ids:
                heapq.heappush(self._again, (seq_of(message_id), message_id))
        elif lane.exhausted:
            # The lane was read to its end: the ids are its new end, no scan needed.
            was_empty = not lane.buf
            lane.buf.extend(ids)
            lane.next_lo = ids[-1] + 1
            if was_empty:
                self._push_head(index)

    def _push_head(self, index: int) -> None:
        lane = self._lanes[index]
        if lane.buf:
            head = lane.buf[0]
            heapq.heappush(self._heads, (seq_of(head), head, index))
        elif not lane.exhausted:
            self._hungry.add(index)


assert STRIPE_BITS <= 16  # layout() walks stripes one by one
