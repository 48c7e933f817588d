"""A member hands a range over only once it serves none of it and its view gives the
range to the asker: from then on, what it stores there is announced to the asker."""

from __future__ import annotations

import asyncio

from dynamiq.cluster.base import Member, StaticMembership
from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.janitor import Janitor
from dynamiq.core.queues import QueueService
from dynamiq.keyspace import slices
from dynamiq.service.cluster import Coordinator
from dynamiq.storage.lmdb import LmdbBackend


class View(StaticMembership):
    """A view the test changes: this node and the others it sees live."""

    def __init__(self, local: Member) -> None:
        super().__init__(local)
        self.others: list[Member] = []

    def members(self) -> list[Member]:
        return sorted([self.local(), *self.others], key=lambda m: m.name)


def _member(name: str) -> Member:
    return Member(name, "127.0.0.1", f"http://{name}.invalid")


async def test_a_range_is_handed_over_once_the_view_gives_it_to_the_asker(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    catalog = Catalog(store)
    await catalog.create_queue("q")
    queues = QueueService(store, catalog, fake_clock)
    view = View(_member("n1"))
    coordinator = Coordinator(view, queues, Janitor(catalog, queues, store, 2.0), None)
    lo, hi = slices(["n1", "n2"])["n2"]
    # Given a node that stopped serving n2's range (its view lost it) but does not
    # see n2 yet: a grouped message it stores there would be announced to no one
    queues.set_keyspace(slices(["n1", "n2"])["n1"])
    assert await coordinator.hand_over(lo, hi, "n2") is None
    # When its view catches up while n2 asks again
    asking = asyncio.ensure_future(coordinator.hand_over(lo, hi, "n2"))
    await asyncio.sleep(0.1)
    assert not asking.done()
    view.others = [_member("n2")]
    # Then it hands the range over: its live leases there (none)
    assert await asyncio.wait_for(asking, 1.0) == {}
