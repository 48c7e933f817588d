"""What the peers ask of this node, over the internal routes: leases from its own
slice, lease changes it holds, news of messages stored, its slice, heartbeats."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dynamiq.cluster.wire import CatalogChange
from dynamiq.core.catalog.news import EVERYTHING, CatalogNews
from dynamiq.core.janitor import Janitor
from dynamiq.core.queues import QueueService
from dynamiq.errors import BackendUnavailable
from dynamiq.keyspace import KeyRange
from dynamiq.models import EVERY_QUEUE, HeldLease, LocalQueueStats, Message
from dynamiq.service.asks import PeerAsks
from dynamiq.service.handoff import SliceKeeper
from dynamiq.service.majority import Majority
from dynamiq.service.watchers import Watchers

__all__ = ["PeerAnswers"]


@dataclass(frozen=True, slots=True)
class PeerAnswers:
    """Answers the other members' calls; each is one call here."""

    queues: QueueService
    majority: Majority
    keeper: SliceKeeper
    asks: PeerAsks
    watchers: Watchers
    janitor: Janitor

    async def receive_here(
        self, queue: str, max_messages: int, visibility_timeout: float | None, waiter: str = ""
    ) -> list[Message]:
        """Lease from this node's own slice only, without waiting (a peer asks).

        A ``waiter`` (the peer, when its receive waits) that gets nothing is told
        when this node next stores messages of ``queue`` (``news``), for a while.
        """
        got = []
        if self.majority.may_serve():
            got = await self.queues.receive(queue, max_messages, visibility_timeout)
        if not got and waiter:
            self.watchers.watch(queue, waiter)
        return got

    def news(self, queue: str, member: str) -> None:
        """``member`` stored messages of ``queue``, which a receive here may wait on."""
        self.asks.news(queue, member)

    async def change_visibility_here(
        self, queue: str, ids: Sequence[int], seconds: float
    ) -> list[int]:
        """Change leases this node holds (a peer forwards them)."""
        if seconds > 0 and not self.majority.may_serve():
            raise self.majority.refusal()  # the majority holds them only as long as agreed
        return await self.queues.change_visibility(queue, ids, seconds)

    def deliveries_here(self, queue: str, ids: Sequence[int]) -> list[int]:
        """Per id, the receive count this node last delivered it with (a peer asks)."""
        return self.queues.deliveries(queue, ids)

    def release(self, queue: str, ids: Sequence[int]) -> None:
        """End the leases on ``ids``: they were deleted through another node."""
        self.queues.release(queue, ids)

    def published_here(self, queue: str, ids: Sequence[int]) -> None:
        """Note ``ids`` stored in this node's slice through another node.

        Raises:
            BackendUnavailable: this node does not serve them now (it is taking the
                slice over, or stood down): whoever does may not meet them in time.
        """
        self.queues.published_elsewhere(queue, ids)
        self.watchers.tell((queue,))
        if ids and not self.asks.serves(ids):
            raise BackendUnavailable("stored in a slice this node does not serve now")

    def local_stats(self, queues: Sequence[str]) -> dict[str, LocalQueueStats]:
        """Return what only this node knows of each queue: leases and rates (for
        ``EVERY_QUEUE``, summed over every queue)."""
        out = self.queues.local_stats(queues)
        if EVERY_QUEUE in queues:
            out[EVERY_QUEUE] = self.queues.states.local_totals()
        return out

    def serving(self) -> KeyRange | None:
        """Return the ids this process serves now."""
        return self.keeper.serving()

    async def hand_over(
        self, lo: int, hi: int, owner: str, gone: Sequence[str] = ()
    ) -> dict[str, list[HeldLease]] | None:
        """Answer a handoff of ``[lo, hi]`` to ``owner`` (``SliceKeeper.hand_over``)."""
        return await self.keeper.hand_over(lo, hi, owner, gone)

    def heard(self, member: str) -> None:
        """Note a heartbeat from ``member``."""
        self.majority.heard(member)

    async def catalog_changed(self, change: CatalogChange | None) -> None:
        """A peer changed the catalog: read again what it wrote (all of it, when it did
        not say) before answering (drops are the changer's)."""
        news = EVERYTHING
        if change is not None:
            news = CatalogNews.heard(
                change.queues, change.topics, change.partial, change.subscriptions
            )
        await self.janitor.refresh(news)
