"""Deduplication: a dedup id seen within its queue's window stores nothing, in fake time,
across engines on one store (another node, a restart) and for racing publishes."""

from __future__ import annotations

import asyncio

from hypothesis import example, given, settings
from hypothesis import strategies as st

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.publish.dedup import content_id
from dynamiq.core.queues import QueueService
from dynamiq.metrics.base import MetricsFanout
from dynamiq.models import Outgoing, QueueSettings
from dynamiq.storage.lmdb import LmdbBackend
from tests.core.fresh import on_fresh_store, one_queue, restarted, two_engines

WINDOW = 100.0

# A step: publish a batch (each message: a dedup id of a few, or none), move the
# clock, or start a fresh engine on the same store (another node, a restart).
Publish = list[str | None]
steps = st.lists(
    st.one_of(
        st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=4),
        # Whole seconds (the store's milliseconds agree), often at the window's edge.
        st.sampled_from([WINDOW - 1, WINDOW, WINDOW + 1]),
        st.integers(0, round(2.5 * WINDOW)).map(float),
        st.just("restart"),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(steps)
@example([["a"], WINDOW - 1, ["a"], 1.0, ["a", "a"]])
def test_a_dedup_id_is_stored_once_per_window(plan: list[Publish | float | str]) -> None:
    """Against a reference: a dedup id is stored when its last stored copy is at
    least a window old (or it never was), else the publish answers that copy's id."""

    async def main(store: LmdbBackend) -> None:
        clock = FakeClock()
        queues = await one_queue(store, clock, QueueSettings(dedup_window_seconds=WINDOW))
        catalog = Catalog(store)
        await catalog.reload()
        bucket = catalog.queue("q").uid
        seen: dict[str, tuple[int, float]] = {}  # dedup id: first id, until
        stored = 0
        for n, step in enumerate(plan):
            if step == "restart":
                queues = await restarted(store, clock)
                continue
            if isinstance(step, float):
                clock.advance(step)
                continue
            assert isinstance(step, list)
            batch = [Outgoing(b"m%d" % n, dedup_id=d) for d in step]
            ids = await queues.publish("q", batch)
            expected = []
            for dedup_id, mid in zip(step, ids, strict=True):
                held = seen.get(dedup_id) if dedup_id else None
                if held is not None and held[1] > clock.now():
                    assert mid == held[0]
                    expected.append(True)
                else:
                    if dedup_id:
                        seen[dedup_id] = (mid, clock.now() + WINDOW)
                    expected.append(False)
                    stored += 1
            assert (ids.duplicate or [False] * len(ids)) == expected
            assert await store.count(bucket) == stored

    on_fresh_store(main)


async def test_content_dedup_claims_by_body_and_attributes(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    catalog = Catalog(store)
    await catalog.create_queue("q", QueueSettings(content_dedup=True))
    counted: list[tuple[str, str, int]] = []

    class Counting(MetricsFanout):
        def lifecycle(self, queue: str, event: str, count: int) -> None:
            counted.append((queue, event, count))

    queues = QueueService(store, catalog, fake_clock, metrics=Counting([]))
    first = await queues.publish("q", [b"x", Outgoing(b"x", attributes={"k": "v"})])
    assert not first.duplicate
    again = await queues.publish(
        "q",
        [
            b"x",
            Outgoing(b"x", attributes={"k": "v"}),
            Outgoing(b"x", attributes={"k": b"v"}),  # bytes are not text
            Outgoing(b"x", dedup_id="own"),  # its own id, not its content
        ],
    )
    assert again[:2] == first and again.duplicate == [True, True, False, False]
    assert counted == [("q", "deduplicated", 2)]
    assert content_id(b"x") != content_id(Outgoing(b"x", attributes={"k": 1}))
    assert content_id(Outgoing(b"x", attributes={"k": 1})) != content_id(
        Outgoing(b"x", attributes={"k": 1.0})
    )


async def test_racing_publishes_of_one_dedup_id_store_one_message(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    catalog = Catalog(store)
    await catalog.create_queue("q")
    engines = [QueueService(store, catalog, fake_clock) for _ in range(4)]
    answers = await asyncio.gather(
        *(e.publish("q", [Outgoing(b"%d" % i, dedup_id="once")]) for i, e in enumerate(engines))
    )
    assert len({a[0] for a in answers}) == 1
    assert sorted(bool(a.duplicate) for a in answers) == [False, True, True, True]
    assert await store.count(catalog.queue("q").uid) == 1


async def test_a_purged_queue_forgets_its_dedup_ids(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues = await one_queue(store, fake_clock)
    (first,) = await queues.publish("q", [Outgoing(b"x", dedup_id="d")])
    await queues.purge("q", fake_clock.wall_ms())
    again = await queues.publish("q", [Outgoing(b"x", dedup_id="d")])
    assert not again.duplicate and again[0] != first


async def test_a_duplicate_tells_the_walks_of_its_first_copy(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    one, two = await two_engines(store, fake_clock)
    assert await one.receive("q", 10) == []  # its walk read every stripe to the end
    # Given a first copy stored by an attempt that never told this engine's walks
    # (it failed after storing, on another node)
    (first,) = await two.publish("q", [Outgoing(b"1", group="g", dedup_id="d1")])
    # When the retry comes here (a duplicate), and the group's next message after it
    again = await one.publish("q", [Outgoing(b"1", group="g", dedup_id="d1")])
    assert again == [first] and again.duplicate == [True]
    await one.publish("q", [Outgoing(b"2", group="g", dedup_id="d2")])
    fake_clock.advance(0.001)
    # Then the first copy comes first, before any fresh walk would have found it
    assert [m.body for m in await one.receive("q", 10)] == [b"1", b"2"]
