"""Message ids and keyspace arithmetic.

An id is a non-negative int64: ``stripe << SEQ_BITS | seq``. The stripe (top
``STRIPE_BITS`` bits) is drawn uniformly at random for each published batch
among the stripes of the publishing node's slice, so a node serves what was
published through it, and ids spread evenly over the slice. The seq (low bits) is a
microsecond timestamp made strictly increasing per generator, so inside one
stripe ids sort oldest-first. Partitions are unions of whole stripes, and a
receive merges its stripes by seq (see ``partitions``), which gives
oldest-first delivery inside a partition.

Ids are unique per generator by construction; across processes that share a
store, the store's conditional create catches the rare collision and the
publisher draws again.
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable, Sequence

__all__ = [
    "SEQ_BITS",
    "SEQ_MASK",
    "STRIPES",
    "STRIPE_BITS",
    "IdGenerator",
    "seq_of",
    "stripe_for",
    "stripe_of",
    "stripe_range",
    "stripes_within",
]

STRIPE_BITS = 8
SEQ_BITS = 63 - STRIPE_BITS
STRIPES = 1 << STRIPE_BITS
SEQ_MASK = (1 << SEQ_BITS) - 1
EPOCH_US = 1_577_836_800_000_000  # 2020-01-01T00:00:00Z


def stripe_for(name: str) -> int:
    """Return the stripe a name pins its messages to (an ordered group, a dedup claim)."""
    return zlib.crc32(name.encode()) % STRIPES


def stripe_of(message_id: int) -> int:
    """Return the stripe an id belongs to."""
    return message_id >> SEQ_BITS


def seq_of(message_id: int) -> int:
    """Return the time-ordered part of an id."""
    return message_id & SEQ_MASK


def stripe_range(stripe: int) -> tuple[int, int]:
    """Return the first and last id of ``stripe`` (inclusive)."""
    return stripe << SEQ_BITS, (stripe << SEQ_BITS) | SEQ_MASK


def _wall_us() -> int:
    return time.time_ns() // 1000


class IdGenerator:
    """Draw ids: a random stripe and a strictly increasing time-based seq."""

    def __init__(
        self,
        clock_us: Callable[[], int] = _wall_us,
        rng: random.Random | None = None,
    ) -> None:
        self._clock_us = clock_us
        self._rng = rng or random.Random()
        self._last = 0

    @property
    def last_seq(self) -> int:
        """The seq of the latest id ``next`` or ``many`` gave: a burst of more than one
        id per microsecond draws seqs ahead of the clock, up to here."""
        return self._last

    def next(self) -> int:
        """Return a new id, later in seq than every id this generator gave before."""
        seq = max(self._clock_us() - EPOCH_US, self._last + 1) & SEQ_MASK
        self._last = seq
        return (self._rng.getrandbits(STRIPE_BITS) << SEQ_BITS) | seq

    def due(
        self, count: int, due_us: int, stripes: tuple[int, int] = (0, STRIPES - 1)
    ) -> list[int]:
        """Return ``count`` ids of one random stripe whose seq is the wall time ``due_us``.

        A message due later (delayed) then sorts where one published at that
        moment would, and the oldest-first walk reaches it when it is due.
        These seqs are not ordered with ``many``'s: the store's conditional
        create catches the rare collision, and the publisher draws again.
        """
        first = min(max(0, due_us - EPOCH_US), SEQ_MASK - count)
        stripe = self._rng.randint(*stripes) << SEQ_BITS
        return [stripe | seq for seq in range(first, first + count)]

    def for_due(self, due: Sequence[int], stripes: tuple[int, int] = (0, STRIPES - 1)) -> list[int]:
        """Return an id per message due at ``due[i]`` (wall microseconds; 0: now),
        one run of ids per due time."""
        if not any(due):
            return self.many(len(due), stripes)
        runs: dict[int, list[int]] = {}
        for i, at in enumerate(due):
            runs.setdefault(at, []).append(i)
        out = [0] * len(due)
        for at, idx in runs.items():
            drawn = self.due(len(idx), at, stripes) if at else self.many(len(idx), stripes)
            for i, mid in zip(idx, drawn, strict=True):
                out[i] = mid
        return out

    def many(self, count: int, stripes: tuple[int, int] = (0, STRIPES - 1)) -> list[int]:
        """Return ``count`` new ids of one random stripe in ``stripes``, in seq order.

        A batch stays in one stripe: stored side by side, its messages are
        written, read and deleted as a few neighbouring pages instead of one
        page each; batches still spread evenly over the stripes allowed
        (a node publishes into its own slice, see ``stripes_within``).
        """
        first = max(self._clock_us() - EPOCH_US, self._last + 1)
        if first + count > SEQ_MASK:
            first = 0  # the seq space lasts until 3162; wrap rather than overflow
        self._last = first + count - 1
        stripe = self._rng.randint(*stripes) << SEQ_BITS
        return [stripe | seq for seq in range(first, first + count)]


def stripes_within(lo: int, hi: int) -> tuple[int, int]:
    """Return the first and last stripe lying wholly inside ``[lo, hi]``.

    Every stripe when none does (a slice narrower than a stripe: more than
    128 members).
    """
    first = -(-lo >> SEQ_BITS)  # ceil
    last = ((hi + 1) >> SEQ_BITS) - 1
    return (first, last) if first <= last else (0, STRIPES - 1)
