"""Depth counters set right again from the keys their buckets hold.

A counter moves by the writes a node knows it made. A write whose outcome is
unknown (its request timed out, or its answer was lost) may have been made
all the same, and a counter update in that state may be applied twice when
it is sent again: the counter then drifts, for good. Such a bucket is marked
unsure and recounted in the background (``run``, each upkeep round): its 2i
keys are counted while its counter stands still, and once it has stood still
for a whole round more (so every node's coalesced deltas of the writes seen
in the count have landed) the counter is moved by the difference. A busy
bucket is corrected once it is quiet; a drained one at once.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import NamedTuple

__all__ = ["Recounts"]

log = logging.getLogger("dynamiq.storage")


class _Measured(NamedTuple):
    """A bucket's keys counted while its counter stood at ``counter`` and this node
    had made ``writes`` writes to it."""

    keys: int
    counter: int
    writes: int


class Recounts:
    """The buckets whose depth counter may be off, and their recounts."""

    def __init__(
        self,
        counter: Callable[[str], Awaitable[int]],
        keys: Callable[[str], Awaitable[int]],
        add: Callable[[str, int], Awaitable[None]],
    ) -> None:
        self._counter = counter  # the stored counter, this node's queued deltas in
        self._keys = keys  # how many keys the bucket holds
        self._add = add  # move the counter
        self._unsure: set[str] = set()
        self._measured: dict[str, _Measured] = {}
        self._writes: Counter[str] = Counter()  # writes this node made, per bucket

    def unsure(self, bucket: str) -> None:
        """Note that ``bucket``'s counter may be off (a write's outcome is unknown)."""
        self._unsure.add(bucket)

    def wrote(self, bucket: str) -> None:
        """Note a write to ``bucket`` by this node (a measure taken before is stale)."""
        if bucket in self._unsure:
            self._writes[bucket] += 1

    def forget(self, bucket: str) -> None:
        """Stop recounting ``bucket`` (dropped)."""
        self._unsure.discard(bucket)
        self._measured.pop(bucket, None)
        self._writes.pop(bucket, None)

    async def run(self) -> None:
        """Take one step of every unsure bucket's recount."""
        for bucket in sorted(self._unsure):
            await self._step(bucket)

    async def _step(self, bucket: str) -> None:
        before = await self._counter(bucket)
        measured = self._measured.pop(bucket, None)
        if measured is not None and (measured.counter, measured.writes) == (
            before,
            self._writes[bucket],
        ):  # quiet for a whole round since the keys were counted
            self.forget(bucket)
            if drift := measured.keys - before:
                await self._add(bucket, drift)
                log.warning(
                    "depth counter of %s was off by %d: set to the %d messages it holds",
                    bucket,
                    -drift,
                    measured.keys,
                )
            return
        writes = self._writes[bucket]
        keys = await self._keys(bucket)
        if await self._counter(bucket) == before and self._writes[bucket] == writes:
            self._measured[bucket] = _Measured(keys, before, writes)
