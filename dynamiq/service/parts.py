"""The parts a node is made of, by job: the engine's, and those that face the cluster."""

from __future__ import annotations

from dataclasses import dataclass

from dynamiq.cluster.quorum import Quorum
from dynamiq.core.archives import Archives
from dynamiq.core.catalog import Catalog
from dynamiq.core.janitor import Janitor
from dynamiq.core.lifecycle.redrive import Redriver
from dynamiq.core.queues import QueueService
from dynamiq.core.spreads import Spreader
from dynamiq.core.topics import TopicService
from dynamiq.service.answers import PeerAnswers
from dynamiq.service.asks import PeerAsks
from dynamiq.service.handoff import SliceKeeper
from dynamiq.service.majority import Majority
from dynamiq.service.reach import Reach
from dynamiq.service.watchers import Watchers

__all__ = ["Cluster", "Engine"]


@dataclass(frozen=True)
class Engine:
    """The queue engine of one node: what it stores and serves."""

    catalog: Catalog
    queues: QueueService
    topics: TopicService
    janitor: Janitor
    redriver: Redriver
    spreader: Spreader
    archives: Archives


@dataclass(frozen=True)
class Cluster:
    """The node in its cluster (a node alone has one too, with no one to reach):
    the slice it serves, its right to, the verbs it carries to the peers and
    its answers to theirs."""

    reach: Reach
    majority: Majority
    keeper: SliceKeeper
    asks: PeerAsks
    answers: PeerAnswers

    @classmethod
    def build(
        cls, reach: Reach, quorum: Quorum | None, queues: QueueService, janitor: Janitor
    ) -> Cluster:
        """Put the node's cluster parts together around its ``reach`` of the others."""
        majority = Majority(reach.membership, quorum)
        watchers = Watchers(reach)
        keeper = SliceKeeper(reach, majority, queues, queues.custody)
        asks = PeerAsks(reach, majority, queues, watchers)
        answers = PeerAnswers(queues, majority, keeper, asks, watchers, janitor)
        return cls(reach, majority, keeper, asks, answers)

    def start(self) -> None:
        """Follow the view from now on."""
        self.keeper.start()

    async def close(self) -> None:
        """Wait for the calls to the peers still in flight."""
        await self.reach.close()
