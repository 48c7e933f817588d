"""What a node's workers tell each other without a call: which queues changed.

A worker that finds another's share of a queue empty does not ask it again for
a while (a receive would otherwise pay a round trip to every sibling every
time). Whether it may skip the ask is decided here: the supervisor maps a
little memory before it forks, shared by every worker it starts (restarts
included), with a row of counters per worker. A worker bumps its counter for
a queue whenever messages of the queue become visible in its share (stored,
offered again, their group moved on), after they are visible to a receive
there. A sibling reads the others' counters of the queue before it asks; it
skips a later ask only if they have not moved since the ask that found
nothing.

Each row has one writer, so a bump is a plain increment; the counters only
grow, so their sum moves exactly when one of them does. Queues share a
counter when their names hash alike, which costs an ask, never a message.
"""

from __future__ import annotations

import mmap
import zlib

__all__ = ["Board"]

SLOTS = 4096  # counters per worker: 32 KiB a worker


class Board:
    """One worker's view of its node's counters: a row of its own, every row read."""

    def __init__(self, counters: memoryview, rows: range, mine: int) -> None:
        self._counters = counters
        self._rows = rows
        self._slots = rows.step
        self._mine = mine  # where this worker's row starts

    @classmethod
    def shared(cls, workers: int, slots: int = SLOTS) -> list[Board]:
        """The boards of a node's ``workers``, in one mapping their processes share
        (anonymous, so every process forked after this sees it)."""
        counters = memoryview(mmap.mmap(-1, 8 * workers * slots)).cast("Q")
        rows = range(0, workers * slots, slots)
        return [cls(counters, rows, mine) for mine in rows]

    def stir(self, queue: str) -> None:
        """Messages of ``queue`` became visible in this worker's share."""
        self._counters[self._mine + self._slot(queue)] += 1

    def mark(self, queue: str) -> int:
        """A number that changes whenever another worker stirs ``queue``."""
        counters, slot, mine = self._counters, self._slot(queue), self._mine
        return sum(counters[row + slot] for row in self._rows if row != mine)

    def _slot(self, queue: str) -> int:
        return zlib.crc32(queue.encode()) % self._slots
