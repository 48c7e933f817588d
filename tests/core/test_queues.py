"""QueueService on a real LMDB store with a fake clock."""

from __future__ import annotations

import asyncio
import random
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.janitor import Janitor
from dynamiq.core.queues import QueueService
from dynamiq.core.routing.notifications import Envelopes
from dynamiq.core.topics import TopicService
from dynamiq.errors import BackendUnavailable, MessageNotFound, QueueNotFound
from dynamiq.metrics.base import MetricsFanout
from dynamiq.models import Outgoing, QueueSettings
from dynamiq.storage.lmdb import LmdbBackend
from tests.core.fresh import Step, scripts, two_engines
from tests.waiting import turns

ENVELOPES = Envelopes("us-east-1", "000000000000", FakeClock())

Engine = tuple[Catalog, QueueService, FakeClock]


@pytest.fixture
async def engine(store: LmdbBackend, fake_clock: FakeClock) -> Engine:
    catalog = Catalog(store)
    await catalog.create_queue("q")
    return catalog, QueueService(store, catalog, fake_clock), fake_clock


async def test_receive_returns_messages_oldest_first_and_leases_only_those(engine: Engine) -> None:
    _, queues, _ = engine
    ids = await queues.publish("q", [b"m%d" % i for i in range(50)])
    first = await queues.receive("q", 10)
    assert [m.id for m in first] == ids[:10]
    # A receive that got fewer than asked does not hold back the rest.
    second = await queues.receive("q", 10)
    assert [m.id for m in second] == ids[10:20]
    assert (await queues.stats("q")).in_flight == 20


async def test_an_unleased_message_reappears_after_the_visibility_timeout(engine: Engine) -> None:
    _, queues, clock = engine
    (mid,) = await queues.publish("q", [b"x"])
    assert [m.id for m in await queues.receive("q", 1, visibility_timeout=5)] == [mid]
    clock.advance(4.9)
    assert await queues.receive("q", 1) == []
    clock.advance(0.1)
    again = await queues.receive("q", 1)
    assert [m.id for m in again] == [mid] and again[0].body == b"x"


async def test_a_lease_of_zero_seconds_leaves_the_message_visible_at_once(
    engine: Engine,
) -> None:
    catalog, queues, _ = engine
    (mid,) = await queues.publish("q", [b"x"])
    # Given a receive that asks for no lease (the clock never moves)
    (first,) = await queues.receive("q", 1, visibility_timeout=0)
    # Then the next receive gets the message again, its receive counted
    (again,) = await queues.receive("q", 1, visibility_timeout=0)
    assert (first.id, again.id, first.receive_count, again.receive_count) == (mid, mid, 1, 2)
    # And a queue whose own timeout is 0 does the same for receives that name none
    await catalog.configure_queue("q", {"visibility_timeout": 0})
    assert [m.receive_count for m in await queues.receive("q", 1)] == [3]
    assert [m.receive_count for m in await queues.receive("q", 1)] == [4]


async def test_a_deleted_message_is_never_delivered_again(engine: Engine) -> None:
    _, queues, clock = engine
    ids = await queues.publish("q", [b"a", b"b"])
    got = await queues.receive("q", 2, visibility_timeout=1)
    assert await queues.delete("q", [got[0].id, 12345]) == [True, False]
    clock.advance(2)
    assert [m.id for m in await queues.receive("q", 5)] == [ids[1]]
    assert (await queues.stats("q")).depth == 1


async def test_compression_is_marked_per_message(engine: Engine) -> None:
    catalog, queues, _ = engine
    (plain,) = await queues.publish("q", [b"plain " * 100])
    await catalog.configure_queue("q", {"compressed_messages": True})
    (packed,) = await queues.publish("q", [b"packed " * 100])
    await catalog.configure_queue("q", {"compressed_messages": False})
    assert (await queues.peek("q", plain)).body == b"plain " * 100
    assert (await queues.peek("q", packed)).body == b"packed " * 100
    got = await queues.receive("q", 5)
    assert sorted(m.body for m in got) == [b"packed " * 100, b"plain " * 100]


async def test_deleting_a_queue_deletes_its_messages(engine: Engine, store: LmdbBackend) -> None:
    catalog, queues, clock = engine
    await queues.publish("q", [b"old"] * 10)
    uid = await catalog.delete_queue("q")
    queues.forget_dropped([uid])
    with pytest.raises(QueueNotFound):
        await queues.receive("q", 1)
    await catalog.create_queue("q")
    assert await queues.receive("q", 10) == []
    assert await catalog.pending_drops(clock.wall_ms()) == [uid]
    await catalog.finish_drop(uid)
    assert await store.count(uid) == 0 and await catalog.pending_drops(clock.wall_ms()) == []


async def test_topic_fan_out_stores_one_copy_per_subscriber(engine: Engine) -> None:
    catalog, queues, _ = engine
    await catalog.create_queue("r")
    await catalog.create_topic("t")
    await catalog.subscribe("t", "q")
    await catalog.subscribe("t", "r")
    ids = (await TopicService(catalog, queues, ENVELOPES).publish("t", [b"one", b"two"])).ids
    assert set(ids) == {"q", "r"} and all(len(v) == 2 for v in ids.values())
    for name in ("q", "r"):
        assert [m.body for m in await queues.receive(name, 5)] == [b"one", b"two"]


async def test_peek_does_not_lease(engine: Engine) -> None:
    _, queues, _ = engine
    (mid,) = await queues.publish("q", [b"p"])
    assert (await queues.peek("q", mid)).body == b"p"
    assert [m.id for m in await queues.receive("q", 1)] == [mid]
    with pytest.raises(MessageNotFound):
        await queues.peek("q", mid + 1)


async def test_long_poll_is_woken_at_once_by_a_publish(
    store: LmdbBackend, no_poll_ticks: None
) -> None:
    from dynamiq.core.clock import MonotonicClock

    catalog = Catalog(store)
    await catalog.create_queue("w")
    queues = QueueService(store, catalog, MonotonicClock())
    waiter = asyncio.create_task(queues.receive("w", 5, wait_seconds=3600))
    await turns()
    assert not waiter.done()
    await queues.publish("w", [b"wake"])
    # Woken by the publish: with no periodic look, nothing else ends an hour's wait
    got = await asyncio.wait_for(waiter, 10)
    assert [m.body for m in got] == [b"wake"]


# -- properties ---------------------------------------------------------------

ops = scripts(
    40, publish=(1, 30), receive=(1, 25), delete=(0, 100), advance=(1, 40), configure=(1, 6)
)


def scripted(test: Callable[..., None]) -> Callable[..., None]:
    """A property test over a script of operations and the randomness its choices are
    made with (60 examples, no deadline: an example runs a whole engine)."""
    examples = settings(max_examples=60, deadline=None)(test)
    drawn: Callable[..., None] = given(script=ops, rng=st.randoms(use_true_random=False))(examples)
    return drawn


def _run(scenario: Callable[[QueueService, Catalog, FakeClock], Awaitable[None]]) -> None:
    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            store = LmdbBackend(Path(tmp), map_size=1 << 28)
            try:
                clock = FakeClock()
                catalog = Catalog(store)
                await catalog.create_queue("q", QueueSettings(max_partitions=6))
                await scenario(QueueService(store, catalog, clock), catalog, clock)
            finally:
                await store.close()

    asyncio.run(main())


@scripted
def test_every_published_undeleted_message_is_eventually_delivered(
    script: list[Step], rng: random.Random
) -> None:
    async def scenario(queues: QueueService, catalog: Catalog, clock: FakeClock) -> None:
        published: set[int] = set()
        deleted: set[int] = set()
        delivered: set[int] = set()
        for op, n in script:
            if op == "publish":
                published.update(await queues.publish("q", [b"%d" % i for i in range(n)]))
            elif op == "receive":
                got = await queues.receive("q", n, visibility_timeout=rng.choice([5, 30]))
                for m in got:
                    assert m.id in published and m.id not in deleted
                    delivered.add(m.id)
            elif op == "delete":
                pool = sorted(delivered - deleted)
                chosen = rng.sample(pool, min(len(pool), n % 10))
                existed = await queues.delete("q", chosen)
                assert all(existed)
                deleted.update(chosen)
            elif op == "advance":
                clock.advance(n)
            else:
                await catalog.configure_queue("q", {"min_partitions": n})
        # Eventually (after every lease ends) everything undeleted is delivered.
        clock.advance(31)
        remaining: set[int] = set()
        while got := await queues.receive("q", 50, visibility_timeout=600):
            remaining.update(m.id for m in got)
        assert remaining == published - deleted

    _run(scenario)


@scripted
def test_a_leased_message_is_never_returned_twice_inside_its_lease(
    script: list[Step], rng: random.Random
) -> None:
    async def scenario(queues: QueueService, catalog: Catalog, clock: FakeClock) -> None:
        lease_end: dict[int, float] = {}
        for op, n in script:
            if op == "publish":
                await queues.publish("q", [b"x"] * n)
            elif op == "receive":
                timeout = rng.choice([3, 10, 30])
                for m in await queues.receive("q", n, visibility_timeout=timeout):
                    assert lease_end.get(m.id, -1.0) <= clock.now(), "delivered inside a lease"
                    lease_end[m.id] = clock.now() + timeout
            elif op == "advance":
                clock.advance(n)
            elif op == "configure":
                await catalog.configure_queue("q", {"min_partitions": n})

    _run(scenario)


async def test_a_first_delivery_writes_nothing_to_the_store(
    engine: Engine, store: LmdbBackend
) -> None:
    _, queues, _ = engine
    await queues.publish("q", [b"m"] * 20)
    commits = store.commits
    assert len(await queues.receive("q", 20)) == 20
    assert store.commits == commits


async def test_recent_records_spare_the_store_read_but_never_outlive_a_delete(
    engine: Engine,
) -> None:
    _, queues, clock = engine
    ids = await queues.publish("q", [b"a", b"b", b"c"])
    await queues.delete("q", [ids[1]])
    # The cache serves a and c; b was deleted and must not come back from it.
    got = await queues.receive("q", 10, visibility_timeout=1)
    assert [m.body for m in got] == [b"a", b"c"]
    # A redelivery reads the store again.
    clock.advance(2)
    assert [m.body for m in await queues.receive("q", 10)] == [b"a", b"c"]


async def test_a_message_deleted_through_another_node_is_not_handed_out_from_memory(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    one, two = await two_engines(store, fake_clock)
    a, b = await one.publish("q", [b"a", b"b"])
    # Given a walk that read both keys (and a record of each in memory)
    assert [m.id for m in await one.receive("q", 1)] == [a]
    # When b is deleted through another node, which tells this one
    assert await two.delete("q", [b]) == [True]
    one.release("q", [b])
    # Then the walk here does not hand it out from what it read before the delete
    assert await one.receive("q", 10) == []


class Recorder(MetricsFanout):
    """Keeps what the engine reports (our own port; no third-party sink involved)."""

    def __init__(self) -> None:
        super().__init__([])
        self.events: list[tuple[str, str, int]] = []

    def received(self, queue: str, count: int, asked: int) -> None:
        self.events.append(("received", queue, count))

    def redelivered(self, queue: str, count: int) -> None:
        self.events.append(("redelivered", queue, count))

    def lifecycle(self, queue: str, event: str, count: int) -> None:
        self.events.append((event, queue, count))

    def deleted(self, queue: str, count: int) -> None:
        self.events.append(("deleted", queue, count))


async def test_redeliveries_are_reported(store: LmdbBackend, fake_clock: FakeClock) -> None:
    catalog = Catalog(store)
    await catalog.create_queue("r")
    recorder = Recorder()
    queues = QueueService(store, catalog, fake_clock, metrics=recorder)
    await queues.publish("r", [b"1", b"2"])
    first = await queues.receive("r", 2, visibility_timeout=1)
    await queues.delete("r", [first[0].id, 999])
    fake_clock.advance(2)
    assert [m.id for m in await queues.receive("r", 2)] == [first[1].id]
    assert recorder.events == [
        ("received", "r", 2),
        ("deleted", "r", 1),
        ("received", "r", 1),
        ("redelivered", "r", 1),
    ]


async def test_change_visibility_extends_or_ends_a_lease(engine: Engine) -> None:
    _, queues, clock = engine
    ids = await queues.publish("q", [b"a", b"b"])
    await queues.receive("q", 2, visibility_timeout=10)
    assert await queues.change_visibility("q", [ids[0], 12345], 60) == [ids[0]]
    assert await queues.change_visibility("q", [ids[1]], 0) == [ids[1]]  # back at once
    assert [m.id for m in await queues.receive("q", 5, visibility_timeout=300)] == [ids[1]]
    clock.advance(30)
    assert await queues.receive("q", 5) == []  # a is still leased: its lease was extended
    clock.advance(31)
    assert [m.id for m in await queues.receive("q", 5)] == [ids[0]]


async def test_a_reload_racing_with_a_change_does_not_undo_it(store: LmdbBackend) -> None:
    catalog = Catalog(store)
    scan = store.meta_scan

    async def slow_scan(prefix: str) -> dict[str, bytes]:
        entries = await scan(prefix)  # read before the change below lands
        if prefix == "":  # the whole catalog's read
            await catalog.create_queue("late")
        return entries

    store.meta_scan = slow_scan  # type: ignore[method-assign]
    await catalog.reload()  # read before "late" was made: it keeps it all the same
    store.meta_scan = scan  # type: ignore[method-assign]
    assert catalog.queues() == ["late"]
    await catalog.reload()
    assert catalog.queues() == ["late"]


class _FailingOver:
    """The real store, failing over: while ``scans_down`` its scans fail, while
    ``down`` its record reads do, and they take ``seconds`` of the fake clock."""

    def __init__(self, store: LmdbBackend, clock: FakeClock) -> None:
        self._store = store
        self._clock = clock
        self.seconds = 0.0
        self.down = self.scans_down = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def scan(self, *args: Any, **kwargs: Any) -> list[list[int]]:
        if self.scans_down:
            raise BackendUnavailable("the store is down")
        return await self._store.scan(*args, **kwargs)

    async def get(self, *args: Any, **kwargs: Any) -> list[bytes | None]:
        if self.down:
            raise BackendUnavailable("the store is failing over")
        self._clock.advance(self.seconds)
        return await self._store.get(*args, **kwargs)


async def test_a_failed_read_is_an_error_not_an_empty_queue(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    outage = _FailingOver(store, fake_clock)
    catalog = Catalog(store)
    await catalog.create_queue("q")
    queues = QueueService(outage, catalog, fake_clock)  # type: ignore[arg-type]
    (mid,) = await queues.publish("q", [b"waiting"])
    # While the store is down a receive fails (503), it does not answer "nothing"
    outage.scans_down = True
    for _ in range(3):
        with pytest.raises(BackendUnavailable):
            await queues.receive("q", 1)
    # and once it is back the message is there at once, not after an empty hint
    outage.scans_down = False
    assert [m.id for m in await queues.receive("q", 1)] == [mid]


async def _reading_slowly(
    store: LmdbBackend, clock: FakeClock, messages: Sequence[bytes | Outgoing] = (b"a", b"b")
) -> tuple[QueueService, _FailingOver, list[int]]:
    """Publish messages through one node; return another node, whose reads of their
    records (not in its memory) go to a store failing over, that store, and their ids."""
    catalog = Catalog(store)
    await catalog.create_queue("q", QueueSettings(visibility_timeout=10))
    ids = await QueueService(store, catalog, clock).publish("q", messages)
    slow = _FailingOver(store, clock)
    return QueueService(slow, catalog, clock), slow, list(ids)  # type: ignore[arg-type]


async def test_a_receive_whose_reads_were_slow_leases_for_a_whole_timeout_from_its_answer(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues, slow, (a, b) = await _reading_slowly(store, fake_clock)
    slow.seconds = 4
    assert [m.id for m in await queues.receive("q", 1)] == [a]
    slow.seconds = 0
    # Its consumer has the whole 10 s from the answer, not the 6 s left of a lease
    # made before the reads
    fake_clock.advance(9.9)
    assert [m.id for m in await queues.receive("q", 1)] == [b]
    fake_clock.advance(0.2)
    assert [m.id for m in await queues.receive("q", 1)] == [a]


async def test_a_message_read_for_longer_than_its_lease_is_handed_out_for_a_whole_lease(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues, slow, (a, b) = await _reading_slowly(store, fake_clock)
    slow.seconds = 11  # longer than the lease made before the reads
    # Its lease did not end while it was read (a count would have been spent on a
    # delivery nobody saw): handed out, for a whole lease from the answer
    assert [m.id for m in await queues.receive("q", 1)] == [a]
    slow.seconds = 0
    fake_clock.advance(9.9)
    assert [m.id for m in await queues.receive("q", 1)] == [b]
    fake_clock.advance(0.2)
    assert [(m.id, m.receive_count) for m in await queues.receive("q", 1)] == [(a, 2)]


async def test_a_group_whose_receive_failed_after_its_walk_comes_in_order_after(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    group = [Outgoing(b"%d" % i, group="g") for i in range(1, 4)]
    queues, failing, _ = await _reading_slowly(store, fake_clock, group)
    # Given a receive whose walk took the group's first message, and whose read of it
    # failed
    failing.down = True
    with pytest.raises(BackendUnavailable):
        await queues.receive("q", 1)
    # Then once the store is back, the group starts from that message, not the next
    failing.down = False
    assert [m.body for m in await queues.receive("q", 10)] == [b"1"]


async def test_a_receive_paused_under_way_answers_nothing_and_leases_nothing(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    awake = True
    catalog = Catalog(store)
    await catalog.create_queue("q")
    queues = QueueService(store, catalog, fake_clock, awake=lambda: awake)
    (mid,) = await queues.publish("q", [b"m"])
    fake_clock.advance(0.001)
    # Given a node whose process stood still while it leased (its view is stale:
    # the others may be handing the message out now)
    awake = False
    assert await queues.receive("q", 10) == []
    # Then the message is not leased here: once the node is itself again, it comes
    awake = True
    assert [m.id for m in await queues.receive("q", 10)] == [mid]


async def test_a_purge_drops_what_came_before_once_every_node_can_have_left_it(
    engine: Engine, store: LmdbBackend
) -> None:
    catalog, queues, clock = engine
    janitor = Janitor(queues, interval=2.0)
    await queues.publish("q", [b"old"] * 5)
    leased = await queues.receive("q", 2)
    old = catalog.queue("q").uid
    assert await queues.purge("q", janitor.drop_time_ms()) == 5
    (new,) = await queues.publish("q", [b"new"])
    assert [m.id for m in await queues.receive("q", 10)] == [new]
    assert await queues.delete("q", [m.id for m in leased]) == [False, False]
    await janitor.run_once()  # too early: a node that missed the change may still write there
    assert await store.count(old) == 5
    clock.advance(4.0)
    await janitor.run_once()
    assert await store.count(old) == 0 and (await queues.stats("q")).depth == 1


async def test_a_bucket_put_back_by_a_change_that_raced_the_purge_is_not_dropped(
    engine: Engine, store: LmdbBackend
) -> None:
    catalog, queues, clock = engine
    janitor = Janitor(queues, interval=2.0)
    before = catalog.queue("q")
    elsewhere = Catalog(store)  # another node, which read the catalog before the purge
    await elsewhere.reload()
    await queues.purge("q", janitor.drop_time_ms())
    await elsewhere.configure_queue("q", {"visibility_timeout": 7})
    await janitor.run_once()
    assert catalog.queue("q").uid == before.uid
    (kept,) = await queues.publish("q", [b"published after the race"])
    clock.advance(5.0)
    await janitor.run_once()
    assert [m.id for m in await queues.receive("q", 10)] == [kept]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.integers(1, 5), st.just(0)), max_size=12))
def test_purge_removes_exactly_what_was_published_before_it(steps: list[int]) -> None:
    """Publish batches (n > 0) and purge (0) in any order: what remains is what followed."""

    async def run(store: LmdbBackend) -> None:
        catalog = Catalog(store)
        await catalog.create_queue("q")
        queues = QueueService(store, catalog, FakeClock())
        kept: list[int] = []
        for n in steps:
            if n:
                kept += await queues.publish("q", [b"m"] * n)
            else:
                assert await queues.purge("q", 0) == len(kept)
                kept = []
        got = await queues.receive("q", 100)
        assert sorted(m.id for m in got) == sorted(kept)

    with tempfile.TemporaryDirectory() as path:
        store = LmdbBackend(Path(path), map_size=1 << 26)
        try:
            asyncio.run(run(store))
        finally:
            asyncio.run(store.close())
