"""The served slice of a node: publishing into it, leasing only from it, handing leases over."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.ids import STRIPES, stripe_of, stripes_within
from dynamiq.core.queues import QueueService
from dynamiq.keyspace import ID_MAX
from dynamiq.models import HeldLease, Outgoing
from dynamiq.storage.lmdb import LmdbBackend
from tests.core.fresh import two_engines
from tests.waiting import turns

HALF = 1 << 62  # two members: [0, HALF-1] and [HALF, ID_MAX]


def test_stripes_within_keep_whole_stripes_only() -> None:
    assert stripes_within(0, ID_MAX) == (0, STRIPES - 1)
    assert stripes_within(0, HALF - 1) == (0, STRIPES // 2 - 1)
    assert stripes_within(HALF, ID_MAX) == (STRIPES // 2, STRIPES - 1)
    third = (1 << 63) // 3
    assert stripes_within(third, 2 * third - 1) == (86, 169)  # from 85.33 to 170.67
    assert stripes_within(5, 10) == (0, STRIPES - 1)  # narrower than a stripe


async def _two_nodes(store: LmdbBackend, clock: FakeClock) -> tuple[QueueService, QueueService]:
    catalog = Catalog(store)
    await catalog.create_queue("q")
    low = QueueService(store, catalog, clock, keyspace=(0, HALF - 1))
    high = QueueService(store, catalog, clock, keyspace=(HALF, ID_MAX))
    return low, high


async def test_a_node_publishes_into_and_leases_from_its_own_slice(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    low, high = await _two_nodes(store, fake_clock)
    low_ids = [i for _ in range(20) for i in await low.publish("q", [b"l"])]
    high_ids = [i for _ in range(20) for i in await high.publish("q", [b"h"])]
    assert all(i < HALF for i in low_ids) and all(i >= HALF for i in high_ids)
    fake_clock.advance(1.5)  # past the cursors' life: each sees the other's writes
    assert {m.id for m in await low.receive("q", 100)} == set(low_ids)
    assert {m.id for m in await high.receive("q", 100)} == set(high_ids)


async def test_nothing_is_served_without_a_slice(store: LmdbBackend, fake_clock: FakeClock) -> None:
    low, _ = await _two_nodes(store, fake_clock)
    await low.publish("q", [b"x"] * 5)
    low.set_keyspace(None)
    assert low.keyspace is None and not low.serves(0)
    assert await low.receive("q", 10) == []
    low.set_keyspace((0, ID_MAX))
    assert len(await low.receive("q", 10)) == 5


async def test_leases_handed_over_keep_a_message_from_a_second_lease(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    low, high = await _two_nodes(store, fake_clock)
    ids = await low.publish("q", [b"a", b"b", b"c"])
    leased = await low.receive("q", 2, visibility_timeout=30)
    fake_clock.advance(10)
    # The low slice moves to the high node: the low node lets it go, hands over.
    low.set_keyspace(None)
    handed = await low.custody.export(0, HALF - 1)
    at = leased[0].first_received_ms
    assert handed == {"q": [HeldLease(m.id, 20.0, 1, at) for m in leased]}
    high.custody.take_over("q", handed["q"])
    high.set_keyspace((0, ID_MAX))
    got = await high.receive("q", 10)
    assert [m.id for m in got] == ids[2:]  # the leased two stay invisible
    fake_clock.advance(20)
    again = await high.receive("q", 10)
    assert {m.id for m in again} == {m.id for m in leased}
    # The count the first node delivered them with went along: this is their second.
    assert {(m.receive_count, m.first_received_ms) for m in again} == {(2, at)}


async def test_expired_leases_outside_the_slice_are_not_offered_again(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    low, _ = await _two_nodes(store, fake_clock)
    await low.publish("q", [b"a"])
    assert len(await low.receive("q", 1, visibility_timeout=5)) == 1
    low.set_keyspace((HALF, ID_MAX))  # its slice moved away
    fake_clock.advance(6)
    assert await low.receive("q", 1) == []
    assert low.custody.stand_down() == 0  # the expired lease was let go, not kept


async def test_a_node_that_stands_down_keeps_its_leases_until_they_end(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    low, _ = await _two_nodes(store, fake_clock)
    await low.publish("q", [b"a", b"b", b"c"])
    assert len(await low.receive("q", 2, visibility_timeout=300)) == 2
    assert low.custody.stand_down() == 2  # consumers still hold them
    (third,) = await low.receive("q", 2)
    assert stripe_of(third.id) < STRIPES // 2
    fake_clock.advance(300)
    assert len(await low.receive("q", 2)) == 2


class HeldReads(LmdbBackend):
    """The embedded store, whose reads can be held at the door (a slow store)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, map_size=1 << 26)
        self.door = asyncio.Event()
        self.door.set()
        self.knocked = asyncio.Event()

    async def get(self, bucket: str, keys: Sequence[int]) -> list[bytes | None]:
        if not self.door.is_set():
            self.knocked.set()
            await self.door.wait()
        return await super().get(bucket, keys)


async def test_a_handoff_waits_for_a_receive_that_started_before_the_move(
    tmp_path: Path, fake_clock: FakeClock
) -> None:
    store = HeldReads(tmp_path / "data")
    try:
        one, two = await two_engines(store, fake_clock)
        await two.publish("q", [Outgoing(b"1", group="g"), Outgoing(b"2", group="g")])
        fake_clock.advance(0.001)
        # Given a receive that leased what its walk found and is reading it
        store.door.clear()
        receiving = asyncio.create_task(one.receive("q", 10))
        await store.knocked.wait()
        # When the slice moves away and the new owner asks for the leases there
        one.set_keyspace(None)
        exporting = asyncio.create_task(one.custody.export(0, ID_MAX))
        await turns()
        # Then the answer waits for that receive, which delivers nothing (not this
        # node's to lease now), and holds no lease on a message nobody got
        assert not exporting.done()
        store.door.set()
        assert await receiving == []
        assert await exporting == {}
    finally:
        await store.close()
