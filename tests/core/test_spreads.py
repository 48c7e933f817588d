"""Wide fan-outs copied behind the answer (``core.spreads``), on a real LMDB store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dynamiq.core import spreads
from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.queues import QueueService
from dynamiq.core.records import encode
from dynamiq.core.routing.notifications import Envelopes
from dynamiq.core.spreads import SPREADS, Spread, Spreader, chunks
from dynamiq.core.topics import TopicPublished, TopicService
from dynamiq.keyspace import KeyRange
from dynamiq.models import QueueRecord
from dynamiq.storage.lmdb import LmdbBackend

QUEUES = ["a", "b", "c", "d", "e"]
names = st.text("abcdefghij-_0123456789", min_size=1, max_size=12)


class Told:
    """What a spreader told of the copies it made: per queue, their ids."""

    def __init__(self) -> None:
        self.ids: dict[str, list[int]] = {}

    async def __call__(self, placed: Mapping[str, Sequence[int | None]]) -> None:
        for queue, mids in placed.items():
            self.ids.setdefault(queue, []).extend(m for m in mids if m is not None)


class Node(NamedTuple):
    """A process's engine (its catalog read), its spreader, what that told."""

    catalog: Catalog
    queues: QueueService
    spreader: Spreader
    told: Told


async def _node(store: LmdbBackend, clock: FakeClock) -> Node:
    catalog = Catalog(store)
    await catalog.reload()
    queues = QueueService(store, catalog, clock)
    spreader = Spreader(queues, widest=2)
    spreader.landed = told = Told()
    return Node(catalog, queues, spreader, told)


@pytest.fixture
async def node(store: LmdbBackend, fake_clock: FakeClock) -> Node:
    catalog = Catalog(store)
    for queue in QUEUES:
        await catalog.create_queue(queue)
    return await _node(store, fake_clock)


def _items(catalog: Catalog, body: bytes) -> list[tuple[QueueRecord, bytes]]:
    return [(catalog.queue(q), body) for q in QUEUES]


async def _held(store: LmdbBackend, catalog: Catalog, queue: str) -> list[int]:
    (found,) = await store.scan(catalog.queue(queue).uid, [(0, 2**63 - 1)], 100)
    return found


async def test_a_spread_is_stored_once_and_its_copies_made_under_its_id(
    store: LmdbBackend, node: Node
) -> None:
    catalog, _, spreader, told = node
    mid = await spreader.hold(_items(catalog, b"news"))
    # Stored once: no queue holds a copy yet, and this process owes five.
    assert [await _held(store, catalog, q) for q in QUEUES] == [[]] * 5
    assert await store.count(SPREADS) == 1 and spreader.owed == 5
    await spreader.copy_held()
    for queue in QUEUES:
        assert await _held(store, catalog, queue) == [mid]
        (raw,) = await store.get(catalog.queue(queue).uid, [mid])
        assert raw is not None and b"news" in raw
    assert told.ids == {q: [mid] for q in QUEUES}
    assert await store.count(SPREADS) == 0 and spreader.owed == 0


async def test_a_restarted_process_copies_what_its_past_life_left(
    store: LmdbBackend, fake_clock: FakeClock, node: Node
) -> None:
    catalog, _, spreader, _ = node
    mid = await spreader.hold(_items(catalog, b"left"))  # then the process dies
    *_, again, told = await _node(store, fake_clock)
    await again.find()
    await again.copy_held()
    assert [await _held(store, catalog, q) for q in QUEUES] == [[mid]] * 5
    assert told.ids == {q: [mid] for q in QUEUES}
    assert await store.count(SPREADS) == 0


async def test_copies_made_before_a_restart_are_not_made_twice(
    store: LmdbBackend, fake_clock: FakeClock, node: Node
) -> None:
    catalog, _, spreader, _ = node
    mid = await spreader.hold(_items(catalog, b"once"))
    (raw,) = await store.get(SPREADS, [mid])
    assert raw is not None
    await spreader.copy_held()
    await store.insert([(SPREADS, mid, raw)])  # as if it died before deleting the spread
    *_, again, told = await _node(store, fake_clock)
    await again.find()
    await again.copy_held()
    assert [await store.count(catalog.queue(q).uid) for q in QUEUES] == [1] * 5
    assert told.ids == {}  # nothing new to tell of
    assert await store.count(SPREADS) == 0


async def test_a_taken_id_gets_a_fresh_one_and_a_deleted_queue_nothing(
    store: LmdbBackend, node: Node
) -> None:
    catalog, _, spreader, told = node
    mid = await spreader.hold(_items(catalog, b"copy"))
    other = encode(b"another process's message", 0, False)
    (stored,) = await store.insert([(catalog.queue("b").uid, mid, other)])
    assert stored
    gone = catalog.queue("e").uid
    await catalog.delete_queue("e")
    await spreader.copy_held()
    held = await _held(store, catalog, "b")
    assert len(held) == 2 and mid in held
    (fresh,) = [m for m in held if m != mid]
    assert await store.get(catalog.queue("b").uid, [mid]) == [other]
    assert told.ids["b"] == [fresh]
    assert "e" not in told.ids and await store.count(gone) == 0
    assert [await _held(store, catalog, q) for q in "acd"] == [[mid]] * 3


async def test_a_spread_outside_the_slice_is_left_to_its_owner(
    store: LmdbBackend, fake_clock: FakeClock, node: Node
) -> None:
    catalog, queues, spreader, _ = node
    mid = await spreader.hold(_items(catalog, b"moved"))
    elsewhere: KeyRange = (mid + 1, 2**63 - 1)
    queues.set_keyspace(elsewhere)  # the slice moved on
    await spreader.copy_held()
    assert spreader.owed == 0 and await store.count(SPREADS) == 1
    assert [await _held(store, catalog, q) for q in QUEUES] == [[]] * 5
    *_, owner, told = await _node(store, fake_clock)  # serves every id
    await owner.find()
    await owner.copy_held()
    assert told.ids == {q: [mid] for q in QUEUES}


@given(
    st.lists(st.tuples(names, st.integers(0, 2)), max_size=30),
    st.lists(st.binary(max_size=5), min_size=1, max_size=3),
)
def test_a_spread_reads_back_as_it_was_stored(
    targets: list[tuple[str, int]], values: list[bytes]
) -> None:
    at = [n % len(values) for _, n in targets] if len(values) > 1 else []
    spread = Spread(values, [name for name, _ in targets], at)
    assert Spread.decode(spread.encode()) == spread


@given(
    st.lists(st.dictionaries(names, st.integers(0, 1), max_size=40), min_size=1, max_size=6),
    st.integers(1, 50),
)
def test_chunks_hold_every_copy_once_and_a_queues_copies_together(
    spreads: list[dict[str, int]], size: int
) -> None:
    values = [b"plain", b"compressed"]
    batch = [
        (mid, Spread(values, list(queues), list(queues.values())).sort())
        for mid, queues in enumerate(spreads)
    ]
    got = list(chunks(batch, size))
    rows = [row for chunk in got for row in chunk]
    expected = [(q, mid, values[a]) for mid, qs in enumerate(spreads) for q, a in qs.items()]
    assert sorted(rows) == sorted(expected)
    where = {q: n for n, chunk in enumerate(got) for q, _, _ in chunk}
    assert all(where[q] == n for n, chunk in enumerate(got) for q, _, _ in chunk)
    assert len(got) <= max(1, -(-len(expected) // size))


def test_a_broadcast_into_queues_that_store_it_alike_keeps_one_value() -> None:
    spread = Spread([b"v"], ["b", "a"], []).sort()
    assert spread == Spread([b"v"], ["a", "b"], [])
    assert list(chunks([(7, spread)], 10)) == [[("a", 7, b"v"), ("b", 7, b"v")]]


async def test_a_wide_topics_queues_are_found_again_when_it_or_a_queue_changes(
    store: LmdbBackend, node: Node, fake_clock: FakeClock
) -> None:
    catalog, queues, spreader, _ = node
    await catalog.create_topic("t")
    for queue in QUEUES:
        await catalog.subscribe("t", queue)
    topics = TopicService(
        catalog, queues, Envelopes("us-east-1", "000000000000", fake_clock), spreader=spreader
    )

    async def publish(body: bytes) -> TopicPublished:
        published = await topics.publish("t", [body])
        await spreader.copy_held()
        return published

    first = await publish(b"one")
    assert first.later == frozenset(QUEUES) and first.stored_now() == {}
    # A queue that takes its copies in the publish's commit now (a delay of its own).
    await catalog.configure_queue("c", {"delay_seconds": 30})
    delayed = await publish(b"two")
    assert delayed.later == frozenset(QUEUES) - {"c"} and list(delayed.stored_now()) == ["c"]
    await catalog.unsubscribe("t", "e")
    await catalog.delete_queue("d")
    narrower = await publish(b"three")
    assert sorted(narrower.ids) == ["a", "b", "c"]
    await catalog.configure_queue("c", {"delay_seconds": 0})
    again = await publish(b"four")
    assert again.later == frozenset({"a", "b", "c"})
    for queue, copies in (("a", 4), ("b", 4), ("c", 4), ("e", 2)):
        assert len(await _held(store, catalog, queue)) == copies, queue


async def test_copies_take_short_commits_while_wide_publishes_arrive(
    store: LmdbBackend, fake_clock: FakeClock, node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog, _, spreader, _ = node
    monkeypatch.setattr(spreads, "CHUNK", 5)
    monkeypatch.setattr(spreads, "BUSY_CHUNK", 2)
    inserted: list[int] = []  # copies per insert: per commit, were the writer idle
    insert = store.insert

    async def counted(items: Sequence[tuple[str, int, bytes]]) -> list[bool]:
        inserted.append(len(items))
        return await insert(items)

    monkeypatch.setattr(store, "insert", counted)
    await spreader.hold(_items(catalog, b"busy"))
    inserted.clear()
    await spreader.copy_held()
    assert inserted == [1, 2, 2]  # a publish just came: five copies, two at a time
    await spreader.hold(_items(catalog, b"quiet"))
    fake_clock.advance(2 * spreads.GATHER_SECONDS)
    inserted.clear()
    await spreader.copy_held()
    assert inserted == [5]  # none for a while: all five together
    assert [len(await _held(store, catalog, q)) for q in QUEUES] == [2] * 5
