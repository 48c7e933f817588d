"""The Redis store's censuses (``StorageBackend.census`` when the spans are the shards).

A queue's census reads its 256 shards: one ``CENSUS`` script per server over the
shards it holds, and the censuses asked for in one turn of the loop (a stats
page's) travel together, one pipeline per server. The script is given the
bucket, the cut and the indexes of the shards (kept per bucket), and works out
each shard's keys and ends itself; it answers only the shards that hold
anything, so an idle queue costs a count per shard and no answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple

from dynamiq.storage.base import Census, Span
from dynamiq.storage.redis.layout import (
    SHARD_BITS,
    SHARD_SHIFT,
    Command,
    member,
    shard_keys,
    shard_slots,
)
from dynamiq.storage.redis.router import Router
from dynamiq.storage.redis.scripts import CENSUS

__all__ = ["SHARDS", "Censuses", "cut_of"]

# Runs commands, one pipeline per server.
Run = Callable[[Sequence[Command]], Awaitable[list[Any]]]
HELD_BY_BUCKETS = 4096  # buckets whose shards' servers a census remembers
# Each shard's whole key range.
SHARDS = [(s << SHARD_SHIFT, (s + 1 << SHARD_SHIFT) - 1) for s in range(1 << SHARD_BITS)]
if SHARD_SHIFT != 55:  # ``CENSUS`` spells a shard's ends as 3 hex digits of 8 x its index
    raise ImportError("the census script's arithmetic is for shards of 2^55 ids")
_INDEXES = [str(s) for s in range(1 << SHARD_BITS)]


class _Held(NamedTuple):
    """A bucket's shards held by one server: a key of the server's (to route by),
    and the shards' indexes as the script takes them."""

    route: str
    shards: str


class Censuses:
    """Censuses of buckets whose spans are their shards."""

    def __init__(self, router: Router, run: Run) -> None:
        self._router = router
        self._run = run
        # Per bucket, its shards grouped by the server that holds them; forgotten
        # when the slots may have moved (a census failed).
        self._held_by: dict[str, list[_Held]] = {}
        # Censuses asked for in one turn of the loop, sent together.
        self._asked: list[tuple[list[Command], asyncio.Future[list[Any]]]] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def census(self, bucket: str, spans: Sequence[Span], cap: int) -> Census | None:
        """The bucket's count, and per shard its first key up to its cut and how many
        keys lie after it (up to ``cap``); None unless every span is a shard cut at
        the same point (``cut_of``)."""
        cut = cut_of(spans)
        if cut is None:
            return None
        args = [cap, bucket, member(cut)]
        commands = [
            (held.route, CENSUS.call([], [*args, held.shards])) for held in await self._held(bucket)
        ]
        count = 0
        firsts: list[int | None] = [None] * len(spans)
        after = [0] * len(spans)
        for answer in await self._together(commands):
            for k in range(0, len(answer), 4):
                shard, card, first, later = answer[k : k + 4]
                count += card
                firsts[shard] = int(first, 16) if first else None
                after[shard] = later
        return Census(count, firsts, after)

    async def _together(self, commands: list[Command]) -> list[Any]:
        """Run a census's commands with those of every census asked for in the same turn
        of the loop: one pipeline per server for a whole stats page."""
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._asked.append((commands, future))
        if len(self._asked) == 1:  # sent once this turn's others joined, by a task of its own
            sending = asyncio.get_running_loop().create_task(self._send())
            self._sending.add(sending)
            sending.add_done_callback(self._sending.discard)
        return await future

    async def _send(self) -> None:
        await asyncio.sleep(0)  # a turn for the others asked for with this one
        asked, self._asked = self._asked, []
        try:
            answers = await self._run([c for commands, _ in asked for c in commands])
        except asyncio.CancelledError:  # the store closing
            for _, future in asked:
                future.cancel()
            raise
        except Exception as exc:
            self._held_by.clear()  # the slots may have moved
            for _, future in asked:
                if not future.done():
                    future.set_exception(exc)
            return
        start = 0
        for commands, future in asked:
            if not future.done():
                future.set_result(answers[start : start + len(commands)])
            start += len(commands)

    async def _held(self, bucket: str) -> list[_Held]:
        """The bucket's shards grouped by the server holding them."""
        groups = self._held_by.get(bucket)
        if groups is None:
            by_server: dict[Any, list[str]] = {}
            servers = await self._router.servers_of(shard_slots(bucket))
            for shard, server in enumerate(servers):
                by_server.setdefault(server, []).append(_INDEXES[shard])
            if len(self._held_by) >= HELD_BY_BUCKETS:
                self._held_by.clear()
            groups = [
                _Held(shard_keys(bucket, int(shards[0]))[1], " ".join(shards))
                for shards in by_server.values()
            ]
            self._held_by[bucket] = groups
        return groups


def cut_of(spans: Sequence[Span]) -> int | None:
    """The point every span is cut at, when the spans are the shards, each cut at its
    first id OR one point below a shard's width (the script's arithmetic), else None."""
    if len(spans) != len(SHARDS):
        return None
    cut = spans[0][1]
    if not 0 <= cut < 1 << SHARD_SHIFT:
        return None
    for (lo, mid, hi), (shard_lo, shard_hi) in zip(spans, SHARDS, strict=True):
        if lo != shard_lo or hi != shard_hi or mid != lo | cut:
            return None
    return cut
