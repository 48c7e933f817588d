"""A node whose process stood still while it answered a receive gives the messages back
instead of answering with leases that another node may have handed out since."""

from __future__ import annotations

from dynamiq.cluster.base import Member, StaticMembership, ViewListener
from dynamiq.cluster.peers import PeerClient
from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.janitor import Janitor
from dynamiq.core.queues import QueueService, QueueStats
from dynamiq.models import ReceiveRequest
from dynamiq.service.cluster import Coordinator
from dynamiq.storage.lmdb import LmdbBackend


class Paused(StaticMembership):
    """A node alone whose process stood still (``awake`` False) until told otherwise;
    with ``noticed``, the pause is handled (its listeners hear of it) as it is asked."""

    def __init__(self) -> None:
        super().__init__(Member("n1", "127.0.0.1", "http://n1.invalid"))
        self.paused = True
        self.noticed = False
        self.listeners: list[ViewListener] = []

    def listen(self, listener: ViewListener) -> None:
        self.listeners.append(listener)

    def awake(self) -> bool:
        if self.noticed:
            self.noticed = False
            for listener in self.listeners:
                listener(self.members(), True)
            return True
        return not self.paused


async def test_a_receive_answered_after_a_pause_gives_its_messages_back(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    catalog = Catalog(store)
    await catalog.create_queue("q")
    queues = QueueService(store, catalog, fake_clock)
    view = Paused()
    coordinator = Coordinator(view, queues, Janitor(catalog, queues, store, 2.0), PeerClient("t"))
    (mid,) = await queues.publish("q", [b"m"])
    fake_clock.advance(0.001)
    ask = ReceiveRequest("q", 10)
    # Given a node whose view is stale after a pause: nothing is answered
    assert await coordinator.receive(ask) == []
    # and the message was given back: once the pause is handled, it comes at once
    view.paused = False
    assert [m.id for m in await coordinator.receive(ask)] == [mid]
    await coordinator.close()


async def test_a_receive_under_way_when_a_pause_is_handled_gives_its_messages_back(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    catalog = Catalog(store)
    await catalog.create_queue("q")
    queues = QueueService(store, catalog, fake_clock)
    view = Paused()
    coordinator = Coordinator(view, queues, Janitor(catalog, queues, store, 2.0), PeerClient("t"))
    coordinator.start()
    await queues.publish("q", [b"m"])
    fake_clock.advance(0.001)
    # Given a receive that leased a message, and the pause handled before it answers
    # (its view is current again, but the lease it holds was dropped with the pause)
    view.paused, view.noticed = False, True
    # Then it answers nothing, and the message is not leased
    assert await coordinator.receive(ReceiveRequest("q", 10)) == []
    assert await queues.stats("q") == QueueStats(1, 0, 1)
    await coordinator.leave()
    await coordinator.close()
