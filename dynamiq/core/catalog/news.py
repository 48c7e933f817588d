"""What a catalog change touched, told to the other processes so that they read again
only that (a delta), and the order in which what is read may be taken.

A change made through one process names the queues, topics and single
subscriptions it wrote; the others read those entries again instead of the
whole catalog (or of a whole topic), so a create costs the same with a
million queues as with one, and a subscribe the same with a topic of a
hundred thousand subscriptions as with one. Reads race with
changes: each read, and each change applied in this process, takes a ticket
from one counter (``Freshness``). What a read started with ticket ``r``
found for a name is taken only if nothing newer was taken for that name
since (a change applied or a read started after ``r``): a slow read never
puts back what a faster one, or a change made here, replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = [
    "EVERYTHING",
    "CatalogNews",
    "Freshness",
    "Turns",
    "collecting",
    "subscription_key",
    "subscription_of",
    "told",
    "touch",
]

Name = tuple[str, str]  # ("q", queue), ("t", topic) or ("s", "topic/queue")


def subscription_key(topic: str, queue: str) -> str:
    """How a subscription is named in news: ``topic/queue`` (neither name has a slash)."""
    return f"{topic}/{queue}"


def subscription_of(key: str) -> tuple[str, str]:
    """The topic and queue a ``subscription_key`` names."""
    topic, _, queue = key.partition("/")
    return topic, queue


@dataclass(frozen=True, slots=True)
class CatalogNews:
    """The names one change (or several) wrote: queues (their records), topics (their
    records and every subscription: read again whole), subscriptions (one each:
    ``topic/queue``). ``everything``: read the whole catalog again."""

    queues: frozenset[str] = frozenset()
    topics: frozenset[str] = frozenset()
    everything: bool = False
    subscriptions: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.everything or self.queues or self.topics or self.subscriptions)

    @classmethod
    def merged(cls, many: Iterable[CatalogNews]) -> CatalogNews:
        """What several changes wrote, together (none says everything)."""
        every = list(many)
        return cls(
            frozenset[str]().union(*(n.queues for n in every)),
            frozenset[str]().union(*(n.topics for n in every)),
            subscriptions=frozenset[str]().union(*(n.subscriptions for n in every)),
        )

    def told(self) -> tuple[list[str], list[str], list[str], list[str]]:
        """The news as other processes are told it: the queues; every topic touched (as
        a process of an earlier release reads it, each again whole); those of them
        whose subscriptions alone changed; and those subscriptions."""
        partial = {subscription_of(key)[0] for key in self.subscriptions} - self.topics
        return (
            sorted(self.queues),
            sorted(self.topics | partial),
            sorted(partial),
            sorted(self.subscriptions),
        )

    @classmethod
    def heard(
        cls,
        queues: Iterable[str],
        topics: Iterable[str],
        partial: Iterable[str] = (),
        subscriptions: Iterable[str] = (),
    ) -> CatalogNews:
        """The news another process told (``told``; from an earlier release, the
        queues and topics alone)."""
        return cls(
            frozenset(queues),
            frozenset(topics) - frozenset(partial),
            subscriptions=frozenset(subscriptions),
        )


EVERYTHING = CatalogNews(everything=True)

_COLLECTING: ContextVar[set[Name] | None] = ContextVar("catalog_news", default=None)


@contextlib.contextmanager
def collecting() -> Iterator[set[Name]]:
    """Collect, while it lasts, what the change running in this task touches."""
    touched: set[Name] = set()
    token = _COLLECTING.set(touched)
    try:
        yield touched
    finally:
        _COLLECTING.reset(token)


def told(touched: Iterable[Name]) -> CatalogNews:
    names = list(touched)
    return CatalogNews(
        frozenset(n for kind, n in names if kind == "q"),
        frozenset(n for kind, n in names if kind == "t"),
        subscriptions=frozenset(n for kind, n in names if kind == "s"),
    )


def touch(kind: str, *names: str) -> None:
    """Note that the change under way wrote ``names`` of ``kind`` ("q" or "t")."""
    touched = _COLLECTING.get()
    if touched is not None:
        touched.update((kind, name) for name in names)


class Freshness:
    """Tickets for reads and for changes applied here, and the newest taken per name."""

    def __init__(self) -> None:
        self._tickets = 0
        self._newest: dict[Name, int] = {}  # the ticket of what the cache holds, if any
        self._reading: set[int] = set()  # reads started and not applied yet

    def changed(self, kind: str, *names: str) -> None:
        """A change made here was applied to the cache (after its store write)."""
        self._tickets += 1
        if self._reading:  # else every read to come starts later: nothing to mark
            for name in names:
                self._newest[(kind, name)] = self._tickets

    def start(self) -> int:
        """A read begins: its ticket."""
        self._tickets += 1
        self._reading.add(self._tickets)
        return self._tickets

    def may_take(self, ticket: int, kind: str, name: str) -> bool:
        """Whether what read ``ticket`` found for ``name`` may replace what is cached."""
        return self._newest.get((kind, name), 0) < ticket

    def kept_since(self, ticket: int, kind: str, prefix: str) -> list[str]:
        """The names of ``kind`` starting with ``prefix`` whose cached value is newer
        than what read ``ticket`` found: what a whole read must leave as it is."""
        newest = self._newest
        if not newest:
            return []
        return [
            n for (k, n), t in newest.items() if k == kind and t >= ticket and n.startswith(prefix)
        ]

    def took(self, ticket: int, kind: str, name: str) -> None:
        self._newest[(kind, name)] = ticket

    def overtaking(self, ticket: int) -> bool:
        """Whether a read that started before ``ticket`` is still under way (what
        ``ticket`` takes must then be marked, or that read could put back older)."""
        return any(t < ticket for t in self._reading)

    def finish(self, ticket: int) -> None:
        """A read is applied. What is marked older than every read still under way
        holds none of them back: it goes (all of it once none is under way)."""
        self._reading.discard(ticket)
        if not self._reading:
            self._newest.clear()
        elif len(self._newest) > 2 * len(self._reading) + 64:
            floor = min(self._reading)
            self._newest = {n: t for n, t in self._newest.items() if t >= floor}


class Turns:
    """One change at a time per name, in this process: a change that reads a record,
    waits for the store and writes it again would otherwise undo another made
    meanwhile (two settings changed at once), or put back a record deleted meanwhile."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: Counter[str] = Counter()

    @contextlib.asynccontextmanager
    async def of(self, name: str) -> AsyncIterator[None]:
        """Hold ``name``'s turn while the block runs."""
        lock = self._locks.setdefault(name, asyncio.Lock())
        self._users[name] += 1
        try:
            async with lock:
                yield
        finally:
            self._users[name] -= 1
            if not self._users[name]:  # nobody waits: a million names leave nothing behind
                del self._users[name], self._locks[name]
