"""Partitions of a node's slice and the least-recently-used choice among them (pure).

A partition is a contiguous id range made of whole stripes (clipped to the
node's slice). A queue has between ``min_partitions`` and ``max_partitions`` of
them on each node: one more is opened when a receive finds every partition busy
serving another receive, and partitions idle for ``max_partition_age`` seconds
are retired down to the minimum. A receive takes the least-recently-used
partition that is not known to be empty.
"""

from __future__ import annotations

import functools
from collections.abc import Container, Iterable
from dataclasses import dataclass

from dynamiq.core.ids import STRIPE_BITS, stripe_of, stripe_range
from dynamiq.keyspace import KeyRange
from dynamiq.models import QueueSettings

__all__ = ["EMPTY_HINT_SECONDS", "Partition", "PartitionSet", "layout"]

# How long a partition found empty is skipped unless a local publish or an
# expired lease says otherwise. Bounds how late a publish through another
# process is noticed.
EMPTY_HINT_SECONDS = 1.0


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


@functools.lru_cache(maxsize=256)
def layout(lo: int, hi: int, count: int, generation: int = 0) -> tuple[Partition, ...]:
    """Split ``[lo, hi]`` into at most ``count`` partitions of whole stripes (the same
    layouts shared by every queue: partitions are values)."""
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
        # Partitions given out and not back yet: one of an earlier layout keeps its
        # stripes from every partition of the current one that overlaps it.
        self._out: list[Partition] = []
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
        """Serve ``[lo, hi]`` from now on, keeping the partition count where it fits."""
        if (lo, hi) != (self._lo, self._hi):
            self._lo, self._hi = lo, hi
            self._relayout(min(len(self._parts), self._max_count()), now)

    def busy(self) -> bool:
        """Whether a receive walks one of the partitions now."""
        return any(self._busy) or bool(self._out)

    def acquire(self, now: float, skip: Container[int] = ()) -> Partition | None:
        """Take the least-recently-used free partition that may hold messages.

        Opens a new partition when every partition is busy and the maximum
        allows it; returns None when nothing is worth scanning. No two receives
        walk one stripe at once (an ordered group's messages are met in order
        by one walk): a partition that overlaps one of an earlier layout still
        given out waits for it to come back.
        """
        self._retire(now)
        if min(self._empty_until) > now and not all(self._busy):
            return None  # every partition known empty (the look of each long poll that waits)
        free = self._free(now, skip)
        if not free and all(self._busy) and len(self._parts) < self._max_count():
            self._relayout(len(self._parts) + 1, now)
            free = self._free(now, skip)
        if not free:
            return None
        index = min(free, key=self._last_used.__getitem__)
        self._busy[index] += 1
        self._out.append(self._parts[index])
        return self._parts[index]

    def _free(self, now: float, skip: Container[int]) -> list[int]:
        earlier = [p for p in self._out if p.generation != self._generation]
        return [
            i
            for i, part in enumerate(self._parts)
            if i not in skip
            and not self._busy[i]
            and self._empty_until[i] <= now
            and not (earlier and any(p.lo <= part.hi and part.lo <= p.hi for p in earlier))
        ]

    def release(
        self, part: Partition, now: float, found: bool, due_at: float | None = None
    ) -> None:
        """Give back a partition after a receive; ``found`` says it had messages.

        ``due_at`` is when its next delayed message is due: an empty hint
        ends then.
        """
        self._out.remove(part)
        i = part.index
        if i >= len(self._parts):
            return
        self._busy[i] = max(0, self._busy[i] - 1)
        self._last_used[i] = now
        woken = i in self._woken  # told of messages while this receive looked
        self._woken.discard(i)
        if part.generation == self._generation:  # else its ranges changed: no hint
            hint = (
                now + EMPTY_HINT_SECONDS
                if due_at is None
                else min(due_at, now + EMPTY_HINT_SECONDS)
            )
            self._empty_until[i] = 0.0 if found or woken else hint

    def next_hint_end(self, now: float) -> float | None:
        """When the first empty hint still running ends (a delayed message comes due,
        or the partition is worth a look again); None when none runs."""
        running = [until for until in self._empty_until if until > now]
        return min(running) if running else None

    def wake(self, ids: Iterable[int]) -> None:
        """Forget the empty hints of the partitions holding ``ids``."""
        first, owner = stripe_of(self._parts[0].lo), self._owner
        for stripe in {stripe_of(message_id) for message_id in ids}:
            if 0 <= stripe - first < len(owner):
                index = owner[stripe - first]
                self._empty_until[index] = 0.0
                if self._busy[index]:  # its receive's "found nothing" is stale
                    self._woken.add(index)

    def _max_count(self) -> int:
        return min(self._settings.max_partitions, stripe_of(self._hi) - stripe_of(self._lo) + 1)

    def _retire(self, now: float) -> None:
        minimum = self._settings.min_partitions
        if len(self._parts) <= minimum:
            return
        age = self._settings.max_partition_age
        if now - min(self._last_used) < age:
            return
        idle = sum(1 for i, t in enumerate(self._last_used) if now - t >= age and not self._busy[i])
        if idle:
            self._relayout(max(minimum, len(self._parts) - idle), now)

    def _relayout(self, count: int, now: float) -> None:
        old_busy = list(getattr(self, "_busy", []))
        old_used = list(getattr(self, "_last_used", []))
        self._generation += 1
        self._parts = layout(self._lo, self._hi, count, self._generation)
        n = len(self._parts)
        self._owner = [p.index for p in self._parts for _ in p.ranges]  # stripe -> partition
        # Receives in progress keep their partition by index: busy counts carry
        # over (a retired index is simply dropped); a new one counts as used now.
        self._busy = (old_busy + [0] * n)[:n]
        self._last_used = (old_used + [now] * n)[:n]
        self._empty_until = [0.0] * n
        self._woken: set[int] = set()  # busy partitions told of messages meanwhile


assert STRIPE_BITS <= 16  # layout() walks stripes one by one
