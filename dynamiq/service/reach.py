"""The other members, reached: who they are, calls to all of them, catalog news.

Catalog changes are announced so the peers read them at once instead of at
their next poll (only what the change wrote: a delta); a change is answered
once every live peer has read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from dynamiq.cluster.base import Member, Membership
from dynamiq.cluster.board import Board
from dynamiq.cluster.peers import PeerClient
from dynamiq.cluster.wire import CatalogChange
from dynamiq.core.catalog.news import EVERYTHING, CatalogNews
from dynamiq.errors import PeerUnavailable
from dynamiq.keyspace import node_of

__all__ = ["Reach"]

log = logging.getLogger("dynamiq.service")

T = TypeVar("T")


class Reach:
    """This process's calls to the other live members (none without a peer client)."""

    def __init__(
        self, membership: Membership, client: PeerClient | None, board: Board | None = None
    ) -> None:
        self.membership = membership
        self.client = client  # None: a node alone, nobody to call
        self.board = board  # None: no sibling workers to read of without a call
        self._tasks: set[asyncio.Task[Any]] = set()
        self._announcement: asyncio.Task[None] | None = None  # the last catalog change told

    def me(self) -> str:
        """This member's name."""
        return self.membership.local().name

    def peers(self) -> list[Member]:
        """Return the other live members."""
        me = self.me()
        return [m for m in self.membership.members() if m.name != me]

    def mark(self, queue: str) -> int:
        """A number that moves whenever another worker's share of ``queue`` may have
        new visible messages (always 0 without sibling workers)."""
        return self.board.mark(queue) if self.board else 0

    def siblings(self) -> list[Member]:
        """Return the other live workers of this node (none for a node of one process)."""
        return [m for m in self.peers() if self.sibling(m)]

    def sibling(self, member: Member) -> bool:
        """Whether ``member`` is a worker of this node."""
        return node_of(member.name) == node_of(self.me())

    async def ask_siblings(
        self, call: Callable[[PeerClient, Member], Awaitable[T]]
    ) -> dict[str, T | None]:
        """Make ``call`` to every other live worker of this node at once; by name, its
        answer, or None where it did not answer (``PeerUnavailable``)."""
        client, siblings = self.client, self.siblings()
        if client is None or not siblings:
            return {}
        got = await asyncio.gather(*(call(client, m) for m in siblings), return_exceptions=True)
        return {
            m.name: None if isinstance(result, BaseException) else result
            for m, result in zip(siblings, got, strict=True)
        }

    async def to_all(self, call: Callable[[PeerClient, Member], Awaitable[None]]) -> None:
        """Make ``call`` to every other live member at once; failures are only logged."""
        client = self.client
        if client is None:
            return
        results = await asyncio.gather(
            *(call(client, m) for m in self.peers()), return_exceptions=True
        )
        for result in results:
            if isinstance(result, Exception):
                log.debug("peer call failed: %s", result)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run a call in the background; ``close`` waits for it."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        """Wait for the announcements and releases still in flight."""
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, PeerUnavailable):
                await task

    # -- catalog news ------------------------------------------------------------

    def announce(self, news: CatalogNews = EVERYTHING) -> None:
        """Tell the peers the catalog changed (they read ``news``'s names again now, or
        everything, not at their next poll)."""
        if self.client is not None:
            change = None
            if not news.everything:
                change = CatalogChange(*news.told())
            self._announcement = self.spawn(self.to_all(lambda p, m: p.sync(m, change)))

    async def tell_peers(self, news: CatalogNews = EVERYTHING) -> None:
        """Tell the peers the catalog changed; return once every live one read it."""
        self.announce(news)
        await self.announced()

    async def announced(self) -> None:
        """Return once every live peer has reloaded the catalog after the last change.

        A peer that does not answer reloads at its next poll.
        """
        if self._announcement is not None:
            await asyncio.shield(self._announcement)
