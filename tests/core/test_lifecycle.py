"""The message lifecycle on a real LMDB store with a fake clock: receive counts,
dead letters, retry backoff, delays and expiry."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.lifecycle.life import _dead
from dynamiq.core.queues import QueueService
from dynamiq.core.routing.notifications import Envelopes
from dynamiq.core.topics import TopicService
from dynamiq.errors import Invalid, QueueInUse
from dynamiq.keyspace import KeyRange
from dynamiq.models import Outgoing, QueueSettings, RetryBackoff
from dynamiq.storage.lmdb import LmdbBackend
from tests.core.fresh import Step, restarted, scripts

DEAD = QueueSettings(visibility_timeout=10, max_receives=3, dead_letter_queue="dlq")


async def _engine(store: LmdbBackend, clock: FakeClock, **settings: object) -> QueueService:
    catalog = Catalog(store)
    await catalog.create_queue("dlq")
    await catalog.create_queue("q", QueueSettings(visibility_timeout=10).updated(dict(settings)))
    return QueueService(store, catalog, clock)


async def _lapse(queues: QueueService, clock: FakeClock, seconds: float = 10.0) -> None:
    clock.advance(seconds)
    await queues.sweep()


async def test_receive_counts_grow_with_each_lease_and_are_stored_when_it_lapses(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues = await _engine(store, fake_clock)
    (mid,) = await queues.publish("q", [b"m"])
    assert (await queues.peek("q", mid)).receive_count == 0
    first = await queues.receive("q", 1)
    first_at = fake_clock.wall_ms()
    await _lapse(queues, fake_clock)
    second = await queues.receive("q", 1)
    assert [(m.receive_count, m.first_received_ms) for m in first + second] == [
        (1, first_at),
        (2, first_at),
    ]
    await queues.change_visibility("q", [mid], 0)
    assert (await queues.peek("q", mid)).receive_count == 2
    (third,) = await (await restarted(store, fake_clock)).receive("q", 1)
    assert third.receive_count == 3 and third.first_received_ms == first_at


async def test_a_counted_queue_stores_the_count_before_delivering(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues = await _engine(store, fake_clock, max_receives=5, dead_letter_queue="dlq")
    (mid,) = await queues.publish("q", [b"m"])
    commits = store.commits
    assert [m.receive_count for m in await queues.receive("q", 1)] == [1]
    assert store.commits == commits + 1 and (await queues.peek("q", mid)).receive_count == 1
    # The node dies holding the lease: the next node counts on from the store.
    fake_clock.advance(10)
    (again,) = await (await restarted(store, fake_clock)).receive("q", 1)
    assert again.receive_count == 2


async def test_a_plain_queue_delivers_without_a_store_write(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues = await _engine(store, fake_clock)
    await queues.publish("q", [b"m"] * 20)
    commits = store.commits
    assert {m.receive_count for m in await queues.receive("q", 20)} == {1}
    assert store.commits == commits


async def test_after_its_last_receive_a_message_moves_to_the_dead_letter_queue(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues = await _engine(store, fake_clock, max_receives=2, dead_letter_queue="dlq")
    (mid,) = await queues.publish("q", [b"poison"])
    for count in (1, 2):
        (m,) = await queues.receive("q", 1)
        assert m.receive_count == count
        await _lapse(queues, fake_clock)
    assert await queues.receive("q", 1) == []
    assert (await queues.stats("q")).depth == 0
    (dead,) = await queues.peek_many("dlq", 10)
    assert dead.id == mid and dead.body == b"poison" and dead.receive_count == 0
    assert dead.dead_letter is not None
    assert (dead.dead_letter.source_queue, dead.dead_letter.reason) == ("q", "max_receives")
    assert dead.dead_letter.receive_count == 2
    assert dead.dead_letter.dead_lettered_ms == fake_clock.wall_ms()
    (received,) = await queues.receive("dlq", 1)
    assert received.receive_count == 1 and received.dead_letter == dead.dead_letter


async def test_a_move_another_node_began_is_finished_not_copied(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues = await _engine(store, fake_clock, max_receives=1, dead_letter_queue="dlq")
    (mid,) = await queues.publish("q", [b"poison"])
    assert len(await queues.receive("q", 1)) == 1
    # Another node, moving it on a store that copies first, got as far as the copy.
    catalog = queues._catalog
    q, dlq = catalog.queue("q"), catalog.queue("dlq")
    (raw,) = await store.get(q.uid, [mid])
    assert raw is not None
    copy = _dead(raw, "q", "max_receives", fake_clock.wall_ms() - 5)
    assert await store.insert([(dlq.uid, mid, copy)]) == [True]
    await _lapse(queues, fake_clock)  # this node's move meets the copy and finishes it
    assert [d.body for d in await queues.peek_many("dlq", 10)] == [b"poison"]
    assert await queues.peek_many("q", 10) == []


async def test_a_released_last_receive_is_dead_lettered_at_once(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues = await _engine(store, fake_clock, max_receives=1, dead_letter_queue="dlq")
    await queues.publish("q", [b"nack me"])
    (m,) = await queues.receive("q", 1)
    assert await queues.change_visibility("q", [m.id], 0) == [m.id]
    assert [d.body for d in await queues.peek_many("dlq", 10)] == [b"nack me"]
    assert await queues.peek_many("q", 10) == []


async def test_a_message_found_at_its_limit_after_a_crash_is_dead_lettered_not_delivered(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues = await _engine(store, fake_clock, max_receives=1, dead_letter_queue="dlq")
    await queues.publish("q", [b"m"])
    assert len(await queues.receive("q", 1)) == 1
    # The node dies holding the lease: another engine finds the message visible.
    other = await restarted(store, fake_clock)
    assert await other.receive("q", 1) == []
    assert [d.body for d in await other.peek_many("dlq", 10)] == [b"m"]


async def test_a_deleted_message_is_never_dead_lettered(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues = await _engine(store, fake_clock, max_receives=1, dead_letter_queue="dlq")
    await queues.publish("q", [b"done"])
    (m,) = await queues.receive("q", 1)
    assert await queues.delete("q", [m.id]) == [True]
    await _lapse(queues, fake_clock)
    assert await queues.peek_many("dlq", 10) == []


async def test_retry_backoff_holds_a_lapsed_message_for_its_delay(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    backoff = {"initial_seconds": 2, "multiplier": 3, "max_seconds": 15}
    queues = await _engine(store, fake_clock, retry_backoff=backoff)
    await queues.publish("q", [b"flaky"])
    for delay in (2, 6, 15, 15):
        (m,) = await queues.receive("q", 1)
        await _lapse(queues, fake_clock)  # the lease (10 s) lapses
        fake_clock.advance(delay - 0.001)
        assert await queues.receive("q", 1) == [], (
            f"early, {delay} s after receive {m.receive_count}"
        )
        fake_clock.advance(0.001)
    assert (await queues.receive("q", 1))[0].receive_count == 5


async def test_a_consumer_chosen_delay_replaces_the_backoff(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues = await _engine(store, fake_clock, retry_backoff={"initial_seconds": 100})
    await queues.publish("q", [b"m"])
    (m,) = await queues.receive("q", 1)
    await queues.change_visibility("q", [m.id], 3)  # a nack with a delay of 3 s
    fake_clock.advance(3)
    assert [x.id for x in await queues.receive("q", 1)] == [m.id]


def test_the_backoff_schedule_is_capped_and_never_overflows() -> None:
    backoff = RetryBackoff(1, 2, 900)
    assert [backoff.delay(n) for n in (1, 2, 3, 10, 11)] == [1, 2, 4, 512, 900]
    assert backoff.delay(100_000) == 900


async def test_a_delayed_message_waits_for_its_time_and_the_rest_flow_past_it(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues = await _engine(store, fake_clock)
    (later,) = await queues.publish("q", [Outgoing(b"later", delay_seconds=5)])
    (now,) = await queues.publish("q", [b"now"])
    assert [m.id for m in await queues.receive("q", 10)] == [now]
    fake_clock.advance(4.999)
    assert await queues.receive("q", 10) == []
    fake_clock.advance(0.001)
    assert [m.body for m in await queues.receive("q", 10)] == [b"later"]
    assert later  # an id like any other


async def test_a_long_poll_wakes_when_a_delayed_message_comes_due(store: LmdbBackend) -> None:
    from dynamiq.core.clock import MonotonicClock

    catalog = Catalog(store)
    await catalog.create_queue("q")
    queues = QueueService(store, catalog, MonotonicClock())
    await queues.publish("q", [Outgoing(b"soon", delay_seconds=0.3)])
    loop = asyncio.get_running_loop()
    started = loop.time()
    got = await queues.receive("q", 1, wait_seconds=5)
    waited = loop.time() - started
    assert [m.body for m in got] == [b"soon"] and 0.28 <= waited < 1.0


async def test_the_queue_delay_is_the_default_and_topics_apply_each_queues(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    catalog = Catalog(store)
    await catalog.create_queue("slow", QueueSettings(delay_seconds=30))
    await catalog.create_queue("fast")
    await catalog.create_topic("t")
    await catalog.subscribe("t", "slow")
    await catalog.subscribe("t", "fast")
    queues = QueueService(store, catalog, fake_clock)
    topics = TopicService(catalog, queues, Envelopes("us-east-1", "000000000000", fake_clock))
    await topics.publish("t", [b"event"])
    await queues.publish("slow", [Outgoing(b"urgent", delay_seconds=0)])
    assert [m.body for m in await queues.receive("fast", 10)] == [b"event"]
    (urgent,) = await queues.receive("slow", 10)
    assert urgent.body == b"urgent" and await queues.delete("slow", [urgent.id]) == [True]
    fake_clock.advance(30)
    assert [m.body for m in await queues.receive("slow", 10)] == [b"event"]


class CountingStore(LmdbBackend):
    """The LMDB store, counting the keys its scans return."""

    scanned = 0

    async def scan(
        self, bucket: str, ranges: Sequence[KeyRange], limit: int | Sequence[int]
    ) -> list[list[int]]:
        found = await super().scan(bucket, ranges, limit)
        self.scanned += sum(map(len, found))
        return found


async def test_waiting_delayed_messages_are_not_rescanned_by_every_receive(
    tmp_path: Path, fake_clock: FakeClock
) -> None:
    store = CountingStore(tmp_path / "store", map_size=1 << 28)
    try:
        queues = await _engine(store, fake_clock)
        waiting = [Outgoing(b"x", delay_seconds=600) for _ in range(5000)]
        for start in range(0, len(waiting), 500):
            await queues.publish("q", waiting[start : start + 500])
        await queues.receive("q", 10)
        before = store.scanned
        for _ in range(50):
            fake_clock.advance(0.05)
            await queues.publish("q", [b"now"])
            assert [m.body for m in await queues.receive("q", 10)] == [b"now"]
        # 50 receives saw 5,000 delayed messages: far fewer keys read than that.
        assert store.scanned - before < 2000
    finally:
        await store.close()


async def test_an_expired_message_is_never_delivered_and_is_removed(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues = await _engine(store, fake_clock)
    await queues.publish("q", [Outgoing(b"brief", ttl_seconds=5), b"lasting"])
    fake_clock.advance(5)
    assert [m.body for m in await queues.receive("q", 10)] == [b"lasting"]
    assert (await queues.stats("q")).depth == 1


async def test_retention_expires_old_messages_into_the_dead_letter_queue_when_asked(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues = await _engine(
        store,
        fake_clock,
        retention_seconds=60,
        dead_letter_queue="dlq",
        dead_letter_on_expiry=True,
    )
    await queues.publish("q", [b"old"])
    fake_clock.advance(30)
    await queues.publish("q", [b"young"])
    fake_clock.advance(30)
    assert [m.body for m in await queues.receive("q", 10)] == [b"young"]
    (dead,) = await queues.peek_many("dlq", 10)
    assert dead.body == b"old" and dead.dead_letter is not None
    assert dead.dead_letter.reason == "expired"


async def test_dead_letter_settings_are_checked_against_the_other_queues(
    store: LmdbBackend,
) -> None:
    catalog = Catalog(store)
    await catalog.create_queue("dlq")
    with pytest.raises(Invalid) as unknown:
        await catalog.create_queue("q", QueueSettings(max_receives=3, dead_letter_queue="nope"))
    assert unknown.value.field == "dead_letter_queue" and catalog.find("q") is None
    await catalog.create_queue("q", DEAD)
    with pytest.raises(Invalid) as itself:
        await catalog.configure_queue("q", {"dead_letter_queue": "q"})
    assert itself.value.field == "dead_letter_queue"
    assert catalog.queue("q").settings == DEAD
    with pytest.raises(Invalid) as alone:
        await catalog.configure_queue("q", {"dead_letter_queue": None})
    assert alone.value.field == "max_receives"
    with pytest.raises(QueueInUse):
        await catalog.delete_queue("dlq")
    await catalog.delete_queue("q")
    await catalog.delete_queue("dlq")


# -- properties ---------------------------------------------------------------

STEPS = scripts(60, publish=(1, 5), receive=(1, 6), delete=(0, 3), nack=(0, 3), advance=(1, 25))


def _run(
    scenario: Callable[[QueueService, FakeClock], Awaitable[None]], **settings: object
) -> None:
    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            store = LmdbBackend(Path(tmp), map_size=1 << 28)
            try:
                clock = FakeClock()
                await scenario(await _engine(store, clock, **settings), clock)
            finally:
                await store.close()

    asyncio.run(main())


@settings(max_examples=60, deadline=None)
@given(STEPS, st.integers(1, 3))
def test_a_message_is_delivered_at_most_max_receives_times_then_dead_lettered_once(
    steps: list[Step], limit: int
) -> None:
    async def scenario(queues: QueueService, clock: FakeClock) -> None:
        deliveries: dict[bytes, int] = {}
        deleted: set[bytes] = set()
        held: list[int] = []
        made = 0
        for op, n in steps:
            if op == "publish":
                await queues.publish("q", [b"m%d" % (made + i) for i in range(n)])
                made += n
            elif op == "receive":
                for m in await queues.receive("q", n):
                    deliveries[m.body] = deliveries.get(m.body, 0) + 1
                    assert m.receive_count == deliveries[m.body] <= limit
                    held.append(m.id)
            elif op in ("delete", "nack") and held:
                mid = held.pop(n % len(held))
                if op == "delete":
                    got = await queues.peek_many("q", 1000)
                    body = next((m.body for m in got if m.id == mid), None)
                    if (await queues.delete("q", [mid]))[0] and body is not None:
                        deleted.add(body)
                else:
                    await queues.change_visibility("q", [mid], 0)
            else:
                clock.advance(n)
                await queues.sweep()
        clock.advance(100)
        await queues.sweep()
        left = [m.body for m in await queues.peek_many("q", 1000)]
        dead = [m.body for m in await queues.peek_many("dlq", 1000)]
        assert len(dead) == len(set(dead)) and not set(dead) & set(left)
        assert not set(dead) & deleted
        for body in dead:
            assert deliveries[body] == limit
        assert len(left) + len(dead) + len(deleted) == made

    _run(scenario, max_receives=limit, dead_letter_queue="dlq")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 30)), min_size=1, max_size=30))
def test_a_delayed_message_is_never_early_and_always_delivered(
    plan: list[tuple[int, int]],
) -> None:
    async def scenario(queues: QueueService, clock: FakeClock) -> None:
        due: dict[bytes, float] = {}
        for i, (delay, pause) in enumerate(plan):
            body = b"m%d" % i
            await queues.publish("q", [Outgoing(body, delay_seconds=delay)])
            due[body] = clock.now() + delay
            for m in await queues.receive("q", 5):
                assert clock.now() >= due[m.body], "delivered early"
                await queues.delete("q", [m.id])
                due.pop(m.body)
            clock.advance(pause)
        clock.advance(21)
        got = await queues.receive("q", 100)
        assert {m.body for m in got} == set(due)

    _run(scenario)


@settings(max_examples=40, deadline=None)
@given(
    st.floats(0.5, 5.0),
    st.floats(1.0, 3.0),
    st.floats(5.0, 60.0),
    st.integers(1, 5),
)
def test_the_backoff_schedule_is_followed(
    initial: float, multiplier: float, most: float, receives: int
) -> None:
    backoff = RetryBackoff(initial, multiplier, max(most, initial))

    async def scenario(queues: QueueService, clock: FakeClock) -> None:
        await queues.publish("q", [b"flaky"])
        for n in range(1, receives + 1):
            (m,) = await queues.receive("q", 1)
            assert m.receive_count == n
            await _lapse(queues, clock)  # its 10 s lease lapses
            wait = backoff.delay(n)
            clock.advance(wait - 0.01)
            assert await queues.receive("q", 1) == [], f"early after receive {n}"
            clock.advance(0.011)  # due by now (a float sum may fall a hair short of it)
        (last,) = await queues.receive("q", 1)
        assert last.receive_count == receives + 1

    _run(
        scenario,
        retry_backoff={
            "initial_seconds": backoff.initial_seconds,
            "multiplier": backoff.multiplier,
            "max_seconds": backoff.max_seconds,
        },
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.integers(1, 30)), st.integers(0, 15)),
        min_size=1,
        max_size=30,
    ),
    st.one_of(st.none(), st.integers(5, 40)),
)
def test_expiry_never_delivers_an_expired_message(
    plan: list[tuple[int | None, int]], retention: int | None
) -> None:
    async def scenario(queues: QueueService, clock: FakeClock) -> None:
        ends: dict[bytes, float] = {}  # body -> when it expires (fake seconds)
        for i, (ttl, pause) in enumerate(plan):
            body = b"m%d" % i
            await queues.publish("q", [Outgoing(body, ttl_seconds=ttl)])
            limits = [clock.now() + s for s in (ttl, retention) if s is not None]
            ends[body] = min(limits) if limits else float("inf")
            for m in await queues.receive("q", 3):
                assert clock.now() < ends[m.body], "an expired message was delivered"
                await queues.delete("q", [m.id])
                ends.pop(m.body)
            clock.advance(pause)
        got = {m.body for m in await queues.receive("q", 100)}
        assert got == {b for b, end in ends.items() if clock.now() < end}
        assert (await queues.stats("q")).depth == len(got)  # the expired ones are gone

    _run(scenario, **({} if retention is None else {"retention_seconds": retention}))
