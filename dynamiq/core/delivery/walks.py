"""Receives in flight, by the slice they started under.

A receive leases the messages its walk found before it reads and delivers
them. A node that hands a range over exports its leases there; a receive
that started before the slice moved may hold such a lease for a moment, with
its message not delivered yet (and, for an ordered group, not its head yet):
exported then, the new owner would keep a lease on a message nobody got, and
deliver it after later messages of its group. The handoff waits for those
receives to end first (each ends within one store read or two).

``walk`` feeds a partition's cursor the store's range scans.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable
from typing import TypeVar

from dynamiq.core.delivery.cursor import PartitionCursor
from dynamiq.storage.base import StorageBackend

__all__ = ["Walks", "walk"]

T = TypeVar("T")


class Walks:
    """Counts receives in flight per slice move (``QueueService._moves``)."""

    def __init__(self) -> None:
        self._running: Counter[int] = Counter()
        self._ended = asyncio.Event()

    async def run(self, moves: int, walk: Awaitable[T]) -> T:
        """Await a receive's walk that started after ``moves`` slice moves, counted."""
        self._running[moves] += 1
        try:
            return await walk
        finally:
            self._running[moves] -= 1
            if not self._running[moves]:
                del self._running[moves]
                self._ended.set()

    async def done_before(self, moves: int) -> None:
        """Wait until no receive that started before ``moves`` slice moves runs."""
        while any(m < moves for m in self._running):
            self._ended.clear()
            await self._ended.wait()


async def walk(store: StorageBackend, uid: str, cursor: PartitionCursor) -> None:
    """Feed ``cursor``, once told what to ``take``, the scans of bucket ``uid`` of
    ``store`` it asks for, until it has its ``result``."""
    while wanted := cursor.requests():
        found = await store.scan(
            uid, [(lo, hi) for _, lo, hi, _ in wanted], [n for *_, n in wanted]
        )
        for (lane, *_), keys in zip(wanted, found, strict=True):
            cursor.feed(lane, keys)
