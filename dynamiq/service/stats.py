"""Cluster-wide stats: each queue's contents as the store holds them, with every live
member's leases and rates added; and the sums over every queue.

A page of ``GET /v2/stats`` costs a few store reads per queue on it. The sums
over every queue cost none per queue: the store's count of every message
(``StorageBackend.total``: one read), and what each member keeps in memory of
the queues it uses (leases, rates), asked of the peers in the same call as the
page's (``EVERY_QUEUE``). A store that keeps no such count (Riak) sums the page
instead, and the answer says so (``Totals.scope``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from dynamiq.cluster.base import Membership
from dynamiq.core.catalog import Catalog
from dynamiq.core.queues import QueueService
from dynamiq.keyspace import node_of
from dynamiq.models import EVERY_QUEUE, LocalQueueStats
from dynamiq.service.asks import PeerAsks
from dynamiq.service.reports import (
    INTERNAL,
    NodeStats,
    QueueStatsDetail,
    live_nodes,
    queue_detail,
    totals,
    totals_of,
)

__all__ = ["StatsReader"]


class StatsReader:
    """Reads queues' stats through this node."""

    def __init__(
        self, catalog: Catalog, queues: QueueService, asks: PeerAsks, membership: Membership
    ) -> None:
        self._catalog = catalog
        self._queues = queues
        self._asks = asks
        self._membership = membership

    async def queues(self, names: Sequence[str]) -> list[QueueStatsDetail]:
        """Return each queue's stats cluster-wide: every live node's leases and rates summed."""
        details, _ = await self._read(names, every=False)
        return details

    async def page(
        self, names: Sequence[str], after: str | None = None, every: bool = True
    ) -> NodeStats:
        """Return the cluster-wide stats of the queues ``names`` (a page of them, ``after``
        the name the next page starts after) and their sums: over every queue
        (``every``) where the store counts every message, else over the page."""
        depth: int | None = None
        if every:
            (queues, peers), depth = await asyncio.gather(
                self._read(names, every), self._queues.context.store.total()
            )
        else:
            queues, peers = await self._read(names, every)
        if depth is None:  # the page's sums
            summed = totals(queues)
        else:
            here = self._queues.states.local_totals()
            summed = totals_of(depth, here + peers)
        index = self._catalog.index
        return NodeStats(
            node_of(self._membership.local().name),
            len(live_nodes(self._membership)),
            queues,
            summed,
            len(index) - index.count_prefixed(*INTERNAL),  # a client's queues
            after,
        )

    async def _read(
        self, names: Sequence[str], every: bool
    ) -> tuple[list[QueueStatsDetail], LocalQueueStats]:
        """The queues' stats, and (``every``) the peers' sums over every queue."""
        names = list(names)
        for name in names:
            self._catalog.queue(name)
        peers, own = await asyncio.gather(
            self._asks.peer_stats([*names, EVERY_QUEUE] if every else names),
            asyncio.gather(*(self._queues.stats(n, detailed=True) for n in names)),
        )
        details = [
            queue_detail(name, mine, peers.get(name, LocalQueueStats()))
            for name, mine in zip(names, own, strict=True)
        ]
        return details, peers.get(EVERY_QUEUE, LocalQueueStats())
