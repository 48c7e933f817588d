"""The cluster against a view the test sets: a range is handed over only once the
view gives it to the asker, and a receive answered across a pause of the process
answers none of the leases another node may have handed out since."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynamiq.cluster.base import Member, StaticMembership, ViewListener
from dynamiq.cluster.peers import PeerClient
from dynamiq.cluster.wire import PeerSigner
from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.janitor import Janitor
from dynamiq.core.queues import QueueService, QueueStats
from dynamiq.errors import BackendUnavailable
from dynamiq.keyspace import ID_MAX, slices
from dynamiq.models import Message, Outgoing, ReceiveRequest
from dynamiq.service.owners import by_owner
from dynamiq.service.parts import Cluster
from dynamiq.service.reach import Reach
from dynamiq.storage.lmdb import LmdbBackend
from tests.waiting import eventually, soon, turns


def _member(name: str) -> Member:
    return Member(name, "127.0.0.1", f"http://{name}.invalid")


class View(StaticMembership):
    """This node ``n1``, the others it sees live, and whether its process stood still:
    ``paused`` (its view is stale), or ``noticed`` (the pause is handled, its
    listeners hear of it, as the view is next asked whether it is current)."""

    def __init__(self) -> None:
        super().__init__(_member("n1"))
        self.others: list[Member] = []
        self.paused = self.noticed = False
        self.listeners: list[ViewListener] = []

    def members(self) -> list[Member]:
        return sorted([self.local(), *self.others], key=lambda m: m.name)

    def listen(self, listener: ViewListener) -> None:
        self.listeners.append(listener)

    def awake(self) -> bool:
        if self.noticed:
            self.noticed = False
            for listener in self.listeners:
                listener(self.members(), True)
        return not self.paused


async def _node(
    store: LmdbBackend, clock: FakeClock, peers: PeerClient | None = None
) -> tuple[QueueService, View, Cluster]:
    """The queue ``q`` with one message due, and a node serving it in ``View``."""
    catalog = Catalog(store)
    await catalog.create_queue("q")
    queues = QueueService(store, catalog, clock)
    await queues.publish("q", [b"m"])
    clock.advance(0.001)
    view = View()
    janitor = Janitor(queues, 2.0)
    peers = peers or PeerClient(PeerSigner("s" * 32))
    return queues, view, Cluster.build(Reach(view, peers), None, queues, janitor)


async def test_a_range_is_handed_over_once_the_view_gives_it_to_the_asker(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues, view, cluster = await _node(store, fake_clock)
    lo, hi = slices(["n1", "n2"])["n2"]
    # Given a node that stopped serving n2's range (its view lost it) but does not
    # see n2 yet: a grouped message it stores there would be announced to no one
    queues.set_keyspace(slices(["n1", "n2"])["n1"])
    assert await cluster.keeper.hand_over(lo, hi, "n2") is None
    # When its view catches up while n2 asks again
    asking = asyncio.ensure_future(cluster.keeper.hand_over(lo, hi, "n2"))
    await turns()
    assert not asking.done()
    view.others = [_member("n2")]
    # Then it hands the range over: its live leases there (none)
    assert await asyncio.wait_for(asking, 1.0) == {}


async def test_a_receive_answered_after_a_pause_answers_nothing(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    _, view, cluster = await _node(store, fake_clock)
    cluster.start()
    ask = ReceiveRequest("q", 10)
    # Given a node whose view is stale after a pause: nothing is answered (its lease is
    # void, and giving it back could end a lease the id's new owner made meanwhile)
    view.paused = True
    assert await cluster.asks.receive(ask) == []
    # Once the pause is handled, every lease of the node is dropped with it, and the
    # message comes again at once
    view.paused, view.noticed = False, True
    got = await eventually(lambda: cluster.asks.receive(ask), what="the message again")
    assert [m.body for m in got] == [b"m"]
    await cluster.keeper.leave()
    await cluster.close()


async def test_a_receive_under_way_when_a_pause_is_handled_gives_its_messages_back(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues, view, cluster = await _node(store, fake_clock)
    cluster.start()
    # Given a receive that leased a message, and the pause handled before it answers
    # (its view is current again, but the lease it holds was dropped with the pause)
    view.noticed = True
    # Then it answers nothing, and the message is not leased
    assert await cluster.asks.receive(ReceiveRequest("q", 10)) == []
    assert await queues.stats("q") == QueueStats(depth=1, partitions=1)
    await cluster.keeper.leave()
    await cluster.close()


async def test_a_publish_in_a_slice_whose_owner_cannot_be_told_is_not_acknowledged(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    # Given a node that sees n2 live, but cannot reach it (cut off from this node)
    peers = PeerClient(PeerSigner("s" * 32))
    queues, view, cluster = await _node(store, fake_clock, peers)
    view.others = [_member("n2")]
    queues.set_keyspace(slices(["n1", "n2"])["n1"])
    lo, _ = slices(["n1", "n2"])["n2"]
    try:
        # When a message was stored in n2's slice (an ordered group's stripe is there),
        # Then its publish is not answered as done: n2's walk would not meet it in
        # time to keep its group in order, so the publisher must send it again
        grouped = [Outgoing(b"m", group="g")]
        with pytest.raises(BackendUnavailable, match="n2"):
            await cluster.asks.published({"q": [lo + 1]}, grouped)
        # while a plain message there is met by a walk anyway, and a publish in this
        # node's own slice needs no one.
        await cluster.asks.published({"q": [lo + 2]}, [b"m"])
        await cluster.asks.published({"q": [0]}, grouped)
    finally:
        await peers.close()


async def test_a_pinned_publish_in_a_slice_this_node_does_not_serve_yet_is_not_acknowledged(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    # Given a node whose view gives it n2's old slice, which it does not serve yet (it
    # is taking it over; or its view is stale, and n2 serves it still)
    queues, _, cluster = await _node(store, fake_clock)
    mine = slices(["n1", "n2"])["n1"]
    queues.set_keyspace(mine)
    lo, _ = slices(["n1", "n2"])["n2"]
    grouped = [Outgoing(b"m", group="g")]
    # When a grouped message is stored there, Then its publish is not acknowledged:
    # the walks of whoever serves the slice may not meet it in time
    with pytest.raises(BackendUnavailable, match="does not serve"):
        await cluster.asks.published({"q": [lo + 1]}, grouped)
    # and a peer telling this node of it hears the same
    with pytest.raises(BackendUnavailable, match="does not serve"):
        cluster.answers.published_here("q", [lo + 1])
    # Once the node serves the slice, the same publish is acknowledged at once
    queues.set_keyspace((mine[0], ID_MAX))
    await cluster.asks.published({"q": [lo + 1]}, grouped)
    cluster.answers.published_here("q", [lo + 1])


async def test_a_receive_under_way_when_the_node_leaves_answers_nothing(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    _, _, cluster = await _node(store, fake_clock)
    cluster.start()
    # Given a receive under way (its leases are good while ``holds`` says so)
    epoch = cluster.majority.epoch()
    assert cluster.majority.holds(epoch)
    # When the node leaves (SIGTERM): the others replay its lease journal, which may not
    # name what that receive leases after this moment
    await cluster.keeper.leave()
    # Then the receive answers nothing: its leases lapse instead
    assert not cluster.majority.holds(epoch)
    await cluster.close()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 7), st.lists(st.integers(0, ID_MAX), max_size=30))
def test_ids_go_to_the_member_whose_slice_holds_them(members: int, ids: list[int]) -> None:
    view = View()
    view.others = [_member(f"n{i}") for i in range(2, members + 1)]
    bounds = slices(m.name for m in view.members())
    ids += [end for lo, hi in bounds.values() for end in (lo, hi)]  # the edges too
    mine, theirs = by_owner(view, ids)
    assert all(bounds["n1"][0] <= mid <= bounds["n1"][1] for mid in mine)
    for member, owned in theirs:
        lo, hi = bounds[member.name]
        assert member.name != "n1" and owned and all(lo <= mid <= hi for mid in owned)
    assert sorted(mine + [mid for _, owned in theirs for mid in owned]) == sorted(ids)


class SlowPeer(PeerClient):
    """A peer that takes 50 ms to answer each receive with ``stock``; it counts them, and
    keeps who asked to be told of news, and the news it was sent."""

    def __init__(self, stock: list[Message]) -> None:
        super().__init__(PeerSigner("s" * 32))
        self.stock = stock
        self.asked = 0
        self.waiters: list[str] = []
        self.told: list[tuple[str, str, str]] = []

    async def receive(
        self, member: Member, queue: str, count: int, visibility: float | None, waiter: str = ""
    ) -> list[Message]:
        self.asked += 1
        self.waiters.append(waiter)
        await asyncio.sleep(0.05)
        return self.stock[:count]

    async def news(self, member: Member, queue: str, name: str) -> None:
        self.told.append((member.name, queue, name))


@contextlib.asynccontextmanager
async def _beside(
    store: LmdbBackend, clock: FakeClock, stock: list[Message], *others: str
) -> AsyncIterator[tuple[SlowPeer, Cluster]]:
    """The node of ``_node`` beside the live ``others``, reached through a ``SlowPeer``
    with ``stock``, serving its slice of the keyspace with nothing of the queue
    visible there."""
    peer = SlowPeer(stock)
    queues, view, cluster = await _node(store, clock, peer)
    view.others = [_member(name) for name in others]
    queues.set_keyspace(slices(["n1", *others])["n1"])
    await queues.receive("q", 10)  # the queue's one message, if it is in this slice
    try:
        yield peer, cluster
    finally:
        await peer.close()


@pytest.mark.parametrize(("stock", "asks"), [([], 1), ([Message(7, b"p")], 20)])
async def test_receives_under_way_at_once_ask_a_peer_found_dry_only_once(
    store: LmdbBackend, fake_clock: FakeClock, stock: list[Message], asks: int
) -> None:
    # Given a node whose peer n2 holds nothing of the queue (or something)
    async with _beside(store, fake_clock, stock, "n2") as (peer, cluster):
        # When 20 receives on the queue come at once, and find nothing here
        got = await asyncio.gather(
            *(cluster.asks.receive(ReceiveRequest("q", 1)) for _ in range(20))
        )
        # Then a burst on a queue the peer holds nothing of asks it once, the others
        # waiting for that answer; while a peer that had some is asked by each
        assert peer.asked == asks
        assert sum(len(g) for g in got) == (20 if stock else 0)


async def test_a_waiting_receive_asks_a_peer_again_as_soon_as_it_tells_of_news(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    # Given a receive waiting on a node whose peer n2 had nothing when asked (the fake
    # clock never lets the wait run out, nor the next look at the peers come)
    async with _beside(store, fake_clock, [], "n2") as (peer, cluster):
        waiting = asyncio.ensure_future(cluster.asks.receive(ReceiveRequest("q", 1, None, 30)))
        await soon(lambda: peer.asked, what="n2 asked")
        # it asked n2 to tell it of the next messages n2 stores
        assert (peer.asked, peer.waiters, waiting.done()) == (1, ["n1"], False)
        # When n2 stores one and says so
        peer.stock = [Message(7, b"p")]
        cluster.answers.news("q", "n2")
        # Then the receive asks n2 at once, and has it
        got = await asyncio.wait_for(waiting, 1.0)
        assert [m.id for m in got] == [7]
        # while a receive that does not wait asks n2 to tell it of nothing
        await cluster.asks.receive(ReceiveRequest("q", 1))
        assert peer.waiters[-1] == ""


async def test_a_peer_whose_waiting_receive_found_nothing_is_told_of_the_next_publish_once(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    async with _beside(store, fake_clock, [], "n2", "n3") as (peer, cluster):
        # Given n2's waiting receive found nothing here, and n3's receive that does not
        # wait found nothing either
        assert await cluster.answers.receive_here("q", 1, None, "n2") == []
        assert await cluster.answers.receive_here("q", 1, None, "") == []
        # When this node stores messages of the queue, twice
        await cluster.asks.published({"q": [1]}, [b"m"])
        await cluster.asks.published({"q": [2]}, [b"m"])
        await cluster.close()
        # Then n2 alone is told, once (it asks again, and so asks to be told again)
        assert peer.told == [("n2", "q", "n1")]
        # and so is one that asked when a peer stored messages here through it
        assert await cluster.answers.receive_here("q", 1, None, "n3") == []
        cluster.answers.published_here("q", [3])
        await cluster.close()
        assert peer.told[1:] == [("n3", "q", "n1")]
