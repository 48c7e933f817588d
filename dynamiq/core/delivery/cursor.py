"""The oldest-first walk over a partition, kept from one receive to the next (pure).

Inside one stripe, id order is age order, so a partition is read as one lane
per stripe range, merged by age. A published batch sits in one stripe, so the
merge takes runs of neighbouring keys, not one heap operation per message.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import TypeVar

from dynamiq.core.delivery.partitions import Partition
from dynamiq.core.ids import SEQ_MASK, seq_of, stripe_of

__all__ = ["CURSOR_SECONDS", "PartitionCursor"]

# A cursor is replaced by a fresh walk this often, to see what it cannot be
# told about (publishes through other processes sharing the store).
CURSOR_SECONDS = 1.0
# Keys read per lane refill: the first read is small (most stripes hold few
# visible messages), then doubles while the lane keeps yielding.
LANE_READ_MIN = 4
LANE_READ_MAX = 256

_END = (1 << 64, 0, 0)  # after every (rank, seq, id)


class _Lane:
    __slots__ = ("buf", "exhausted", "hi", "limit", "next_lo", "touched")

    def __init__(self, lo: int, hi: int) -> None:
        self.buf: deque[int] = deque()
        self.next_lo, self.hi = lo, hi
        self.limit = LANE_READ_MIN
        self.exhausted = False
        # While a scan of the lane is out: the ids published into it meanwhile
        # (the scan may have read the stripe before they were stored).
        self.touched: list[int] | None = None


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
    to their end (``touch``), so a queue that keeps up needs no scan at all;
    one into a lane whose scan is out is placed when the scan comes back, as
    the scan may have read the stripe before the message was stored.
    Anything else (another process publishing) is caught up by replacing the
    cursor with a fresh one, which the caller does every ``CURSOR_SECONDS``,
    and at once after a receive that failed after taking ids.

    A take may rank stripes (``ranks``: a noisy tenant's, ``fairness``): the
    merge then goes by rank first, age second, so a stripe ranked 1 is met only
    when no stripe ranked 0 has a message due, and so on.
    """

    def __init__(self, part: Partition, born: float) -> None:
        self.part = part
        self.born = born
        self._first_stripe = stripe_of(part.lo)
        self._lanes = [_Lane(lo, hi) for lo, hi in part.ranges]
        self._hungry = set(range(len(self._lanes)))
        self._heads: list[tuple[int, int, int, int]] = []  # (rank, seq, id, lane)
        self._again: list[tuple[int, int, int]] = []  # (rank, seq, id): leases that ended
        self._ranks: Mapping[int, int] = {}  # stripe: its rank (0 when not named)
        self._top = 0  # the highest rank named
        self._skip: Container[int] = ()
        self._want = 0
        self._due = SEQ_MASK
        # The seq of the oldest key the last walk stopped at because it is not
        # due yet (a delayed message), or None.
        self.next_due: int | None = None
        self._upto = 0
        # Whether the last walk stopped at a message of a rank above its ``upto``.
        self.held_back = False
        self._taken: set[int] = set()
        self.result: list[int] = []

    def take(
        self,
        want: int,
        skip: Container[int],
        due: int = SEQ_MASK,
        ranks: Mapping[int, int] = {},
        upto: int | None = None,
    ) -> None:
        """Start looking for the ``want`` oldest ids that are not in ``skip``, the
        stripes of a lower rank first (``ranks``: stripe to rank, 0 when not named),
        and none of a rank above ``upto`` (``held_back`` then says one was met).

        Ids whose seq is later than ``due`` are not taken: a delayed message's
        id carries the time it is due, so the walk stops at the first one.
        """
        self._want, self._skip, self._due = want, skip, due
        if ranks != self._ranks:
            self._rank(ranks)
        self._upto = self._top if upto is None else upto
        self.result = []
        self._taken = set()
        self.next_due = None
        self.held_back = False

    def _rank(self, ranks: Mapping[int, int]) -> None:
        """Order the merge by ``ranks`` from now on."""
        self._ranks, self._top = ranks, max(ranks.values(), default=0)
        rank = self._rank_of
        self._heads = [(rank(i), s, i, lane) for _, s, i, lane in self._heads]
        self._again = [(rank(i), s, i) for _, s, i in self._again]
        heapq.heapify(self._heads)
        heapq.heapify(self._again)

    def _rank_of(self, message_id: int) -> int:
        return self._ranks.get(stripe_of(message_id), 0) if self._ranks else 0

    def requests(self) -> list[tuple[int, int, int, int]]:
        """Advance the merge; return ``(lane, lo, hi, limit)`` scans still needed."""
        heads, again, due = self._heads, self._again, self._due
        # Set aside: the entries of a rank none of whose messages is due yet.
        later_heads: list[tuple[int, int, int, int]] = []
        later_again: list[tuple[int, int, int]] = []
        while len(self.result) < self._want and not self._hungry and (heads or again):
            first = again[0] if again and (not heads or again[0] < heads[0][:3]) else heads[0]
            rank, seq = first[0], first[1]
            if rank > self._upto:
                self.held_back = True
                break
            if seq > due:  # nothing of this rank is due: a higher one may be
                self.next_due = seq if self.next_due is None else min(self.next_due, seq)
                if rank == self._top:
                    break
                later_heads += _pop_rank(heads, rank)
                later_again += _pop_rank(again, rank)
                continue
            if len(first) == 3:
                self._emit(heapq.heappop(again)[2])
                continue
            index = heapq.heappop(heads)[3]
            bound = min(
                heads[0][:3] if heads else _END, again[0] if again else _END, (rank, due + 1, 0)
            )
            self._take_run(index, rank, bound)
            self._push_head(index)
        for head in later_heads:
            heapq.heappush(heads, head)
        for entry in later_again:
            heapq.heappush(again, entry)
        if len(self.result) >= self._want:
            return []
        lanes, asked = self._lanes, sorted(self._hungry)
        for i in asked:  # a scan goes out: note what is published meanwhile
            if lanes[i].touched is None:
                lanes[i].touched = []
        return [(i, lanes[i].next_lo, lanes[i].hi, lanes[i].limit) for i in asked]

    def _take_run(self, index: int, rank: int, bound: tuple[int, int, int]) -> None:
        # A published batch sits in one stripe: take the lane's keys while they
        # are older than every other lane's head, not one heap operation each.
        buf, want, emit = self._lanes[index].buf, self._want, self._emit
        emit(buf.popleft())
        while buf and len(self.result) < want and (rank, buf[0] & SEQ_MASK, buf[0]) < bound:
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
        touched, lane.touched = lane.touched, None
        if touched:
            self._catch_up(lane, touched, keys)
        self._push_head(lane_index)

    def _catch_up(self, lane: _Lane, touched: list[int], keys: Sequence[int]) -> None:
        """Place ids published into a lane while its scan was out, that the scan
        did not return (it read the stripe before they were stored)."""
        seen = set(keys)
        for message_id in sorted(touched):
            if message_id in seen:
                continue
            if message_id < lane.next_lo:  # the scan went past it
                self._again_one(message_id)
            elif lane.exhausted:  # the lane's new end
                lane.buf.append(message_id)
                lane.next_lo = message_id + 1
            # else: the lane's next scan starts below it

    def offer_again(self, ids: Iterable[int]) -> None:
        """Offer ids whose lease ended (they were handed out before)."""
        for message_id in ids:
            if message_id in self.part:
                self._again_one(message_id)

    def _again_one(self, message_id: int) -> None:
        heapq.heappush(self._again, (self._rank_of(message_id), seq_of(message_id), message_id))

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
                self._again_one(message_id)
        elif lane.touched is not None:  # placed when the scan that is out comes back
            lane.touched.extend(ids)
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
            heapq.heappush(self._heads, (self._rank_of(head), seq_of(head), head, index))
        elif not lane.exhausted:
            self._hungry.add(index)


_Entry = TypeVar("_Entry", tuple[int, int, int], tuple[int, int, int, int])


def _pop_rank(heap: list[_Entry], rank: int) -> list[_Entry]:
    """Pop the entries of ``rank`` off the top of ``heap`` (its lowest rank)."""
    popped: list[_Entry] = []
    while heap and heap[0][0] == rank:
        popped.append(heapq.heappop(heap))
    return popped
