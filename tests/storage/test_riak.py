"""The Riak adapter without a Riak node: siblings, failures, round trips, configuration."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.riak import measure
from dynamiq.config.sources import load_settings
from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.queues import QueueService
from dynamiq.errors import BackendUnavailable, ConfigError
from dynamiq.storage.riak import RiakBackend, RiakRequest
from dynamiq.storage.riak.depths import DepthDeltas
from dynamiq.storage.riak.http import siblings
from tests.servers import refused
from tests.storage.riak_model import RiakModel


def test_siblings_are_read_from_a_multipart_answer() -> None:
    body = (
        b"\r\n--XX\r\nContent-Type: application/octet-stream\r\nEtag: 1\r\n\r\nrecord\r\n"
        b"--XX\r\nContent-Type: application/octet-stream\r\nX-Riak-Deleted: true\r\n"
        b"Etag: 2\r\n\r\n\r\n--XX--\r\n"
    )
    assert siblings("multipart/mixed; boundary=XX", body) == [(False, b"record"), (True, b"")]


async def test_no_reachable_node_is_a_503_not_a_crash() -> None:
    with refused(2) as (one, other):
        store = RiakBackend([f"http://{one}", f"http://{other}"])
        try:
            with pytest.raises(BackendUnavailable, match="no Riak node answered"):
                await store.get("q", [1])
            with pytest.raises(BackendUnavailable):
                await store.meta_scan("")
        finally:
            await store.close()
            await store.close()


def test_the_riak_backend_needs_nodes() -> None:
    with pytest.raises(ConfigError, match=r"core\.riaknodes"):
        load_settings(env={"DYNAMIQ_STORAGE_BACKEND": "riak"})
    s = load_settings(
        env={"DYNAMIQ_STORAGE_BACKEND": "riak", "DYNAMIQ_CORE_RIAKNODES": "a:8098, http://b:8098"}
    )
    assert s.core.riak_nodes() == ["http://a:8098", "http://b:8098"]
    with pytest.raises(ConfigError, match="not host:port"):
        load_settings(env={"DYNAMIQ_CORE_RIAKNODES": "nohost"})


class FakeRiak:
    """A transport standing in for Riak: answers at once, fails, or hangs, per key."""

    def __init__(self, fail: Iterable[int] = (), hang: Iterable[int] = ()) -> None:
        self.fail, self.hang = set(fail), set(hang)
        self.counter = 0
        self.puts: list[int] = []
        self.cancelled = 0
        self.in_flight = 0
        self.sent = 0  # requests for objects that reached the transport

    async def __call__(self, request: RiakRequest) -> tuple[int, dict[str, str], bytes]:
        if "/datatypes/" in request.url:  # the depth counter
            if request.method == "POST" and request.data:
                self.counter += json.loads(request.data)["update"]["n_counter"]
            return 200, {}, json.dumps({"value": {"n_counter": self.counter}}).encode()
        key = int(request.url.rsplit("/", 1)[1])
        self.sent += 1
        self.in_flight += 1
        try:
            if key in self.hang:
                await asyncio.Event().wait()  # a paused node: the request never ends
            await asyncio.sleep(0.01 * (key % 5))
            if key in self.fail:
                raise aiohttp.ServerDisconnectedError()
            if request.method == "PUT":
                self.puts.append(key)
            return (204, {}, b"")
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1

    async def close(self) -> None:
        pass


async def test_a_batch_failing_partway_still_counts_what_it_wrote() -> None:
    fake = FakeRiak(fail={7})
    store = RiakBackend(["http://riak:8098"], pool_size=16, timeout=2.0, transport=fake)
    with pytest.raises(BackendUnavailable):
        await store.insert([("q", k, b"x") for k in range(10)])
    # The counter moved by exactly the writes that were made (no drift below 0).
    assert await store.count("q") == len(fake.puts) > 0
    assert fake.counter == len(fake.puts)
    deleted = list(fake.puts)
    fake.fail = {deleted[-1]}
    with pytest.raises(BackendUnavailable):
        await store.delete("q", deleted)
    assert 0 < await store.count("q") < len(fake.puts)
    assert await store.count("q") == fake.counter
    await store.close()


async def test_the_first_failure_cancels_the_rest_of_the_batch() -> None:
    fake = FakeRiak(fail={0}, hang={1, 2, 3})
    # An hour's deadline: only the failure can end the call before the test's timeout
    store = RiakBackend(["http://riak:8098"], pool_size=4, timeout=3600.0, transport=fake)
    with pytest.raises(BackendUnavailable):
        await store.get("q", [0, 1, 2, 3, 4, 5])
    assert fake.in_flight == 0 and fake.cancelled >= 3  # no slot is left held


async def test_a_paused_riak_answers_within_the_timeout_slot_waits_included() -> None:
    fake = FakeRiak(hang=set(range(100)))
    store = RiakBackend(["http://riak:8098"], pool_size=2, timeout=1.0, transport=fake)
    results = await asyncio.gather(
        *(store.get("q", [k]) for k in range(10)), return_exceptions=True
    )
    # Ten calls, two slots, every request hangs: each ends at its own deadline,
    # its wait for a slot included. Queued behind the others with a deadline of
    # its own from its slot on, every call would have sent its request in turn;
    # here only the slots' first holders did, and at most two that took a slot
    # freed at the deadline's edge.
    assert all(isinstance(r, BackendUnavailable) for r in results)
    assert fake.sent <= 4 and fake.in_flight == 0


# -- round trips, counted on a transport that answers as Riak's HTTP API does --


class LostAnswers(RiakModel):
    """Riak that makes the writes of the ``lost`` keys but whose answers never arrive,
    as when a request times out after Riak took it: their outcome is unknown."""

    def __init__(self, lost: Iterable[int] = ()) -> None:
        super().__init__()
        self.lost = set(lost)

    async def __call__(self, request: RiakRequest) -> tuple[int, dict[str, str], bytes]:
        answer = await super().__call__(request)
        key = request.url.rsplit("/", 1)[1]
        if "/keys/" in request.url and key.isdigit() and int(key) in self.lost:
            self.lost.discard(int(key))
            raise aiohttp.ServerDisconnectedError()
        return answer

    def held(self, bucket: str) -> int:
        """How many objects ``bucket`` holds: the truth a counter should tell."""
        return sum(1 for b, _ in self.objects if b == bucket)


async def test_a_counter_off_by_writes_of_unknown_outcome_is_set_right_once_quiet() -> None:
    # Given a publish of ten whose answers for two were lost, though Riak stored them
    model = LostAnswers({3, 5})
    store = RiakBackend(["http://riak:8098"], transport=model)
    with pytest.raises(BackendUnavailable):
        await store.insert([("q", k, b"x") for k in range(10)])
    truth = model.held("q")
    assert await store.count("q") < truth  # they were never counted
    # When the upkeep rounds come: the keys are counted while the counter stands still,
    # and a write by this node in between makes that count stale
    await store.maintain()
    await store.insert([("q", 100, b"x")])
    await store.maintain()
    assert await store.count("q") < truth + 1  # not set right yet: it was not quiet
    # Then once the counter stood still for a whole round, it tells the truth, and
    # stays right (the bucket is not recounted any more)
    await store.maintain()
    assert await store.count("q") == model.held("q") == truth + 1
    model.requests.clear()
    await store.maintain()
    assert model.requests["index"] == 0
    await store.close()


async def test_a_counter_moved_by_another_node_meanwhile_is_counted_again() -> None:
    # Given a delete whose answer was lost, though Riak made it: the counter is high
    model = LostAnswers()
    store = RiakBackend(["http://riak:8098"], transport=model)
    other = RiakBackend(["http://riak:8098"], transport=model)
    await store.insert([("q", k, b"x") for k in range(5)])
    model.lost = {2}
    with pytest.raises(BackendUnavailable):
        await store.delete("q", [2])
    assert (await store.count("q"), model.held("q")) == (5, 4)
    # When another node writes between the count of the keys and the next round
    await store.maintain()
    await other.insert([("q", 50, b"x")])
    await other.count("q")  # its delta has landed
    await store.maintain()
    # Then nothing is set from the stale count; the next quiet round sets it right
    assert await store.count("q") == 6
    await store.maintain()
    assert await store.count("q") == model.held("q") == 5
    await store.close()
    await other.close()


async def riak_engine(model: RiakModel, clock: FakeClock) -> tuple[RiakBackend, QueueService]:
    store = RiakBackend(["http://riak:8098"], transport=model)
    catalog = Catalog(store)
    await catalog.create_queue("q")
    return store, QueueService(store, catalog, clock)


async def test_a_drain_reads_each_message_once_and_deletes_it_without_a_read(
    fake_clock: FakeClock,
) -> None:
    model = RiakModel()
    store, queues = await riak_engine(model, fake_clock)
    for _ in range(20):
        await queues.publish("q", [b"m%d" % i for i in range(10)])
    fake_clock.advance(5)  # past what this node keeps in memory of its publishes
    model.requests.clear()
    model.reads = 0
    receives = delivered = 0
    while got := await queues.receive("q", 10):
        receives += 1
        delivered += len(got)
        assert all(await queues.delete("q", [m.id for m in got]))
    assert delivered == 200
    # One GET per message; each DELETE carries its vclock, so Riak reads nothing more.
    assert model.requests["get"] == delivered and model.reads == delivered
    assert model.requests["delete_with_vclock"] == delivered and model.requests["delete"] == 0
    # A fresh partition walk is one 2i page over the span, not one per stripe.
    assert model.requests["index"] <= 2 * receives
    assert await store.count("q") == 0
    await store.close()


async def test_a_message_served_from_memory_is_deleted_without_a_read(
    fake_clock: FakeClock,
) -> None:
    model = RiakModel()
    store, queues = await riak_engine(model, fake_clock)
    await queues.publish("q", [b"a", b"b"])
    model.reads = 0
    model.requests.clear()
    got = await queues.receive("q", 10)
    assert [m.body for m in got] == [b"a", b"b"] and [m.receive_count for m in got] == [1, 1]
    assert model.requests["get"] == model.requests["put"] == 0  # no read, no count written
    # The delete carries the vector clock the publish returned: Riak reads nothing.
    await queues.delete("q", [m.id for m in got])
    assert model.reads == 0 and model.requests["delete_with_vclock"] == 2
    await store.close()


async def test_a_counted_queue_writes_its_counts_with_the_publishs_clock(
    fake_clock: FakeClock,
) -> None:
    model = RiakModel()
    store, queues = await riak_engine(model, fake_clock)
    await queues._catalog.create_queue("dead")
    await queues._catalog.configure_queue("q", {"max_receives": 3, "dead_letter_queue": "dead"})
    await queues.publish("q", [b"a", b"b"])
    model.reads = 0
    model.requests.clear()
    got = await queues.receive("q", 10)
    assert model.requests["get"] == 0 and model.requests["put"] == 2 and model.reads == 0
    await queues.delete("q", [m.id for m in got])
    assert model.reads == 0 and model.requests["delete_with_vclock"] == 2
    await store.close()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40)), max_size=120),
    st.lists(st.integers(0, 12), min_size=4, max_size=4),
    st.sampled_from([3, 10, 1000]),
    st.sampled_from([2, 3, 16]),
)
async def test_a_scan_of_several_ranges_answers_each_as_its_own_query_would(
    keys: list[tuple[int, int]], limits: list[int], page: int, span: int
) -> None:
    model = RiakModel()
    store = RiakBackend(["http://riak:8098"], transport=model)
    ids = sorted({stripe << 10 | seq for stripe, seq in keys})
    for key in ids:
        model.objects["b", key] = (b"", "vc")
    ranges = [(s << 10, s << 10 | 1023) for s in range(4)]
    expected = [
        [k for k in ids if lo <= k <= hi][:n] for (lo, hi), n in zip(ranges, limits, strict=True)
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("dynamiq.storage.riak.backend.PAGE", page)  # the span's page runs short
        patch.setattr("dynamiq.storage.riak.backend.SPAN_RANGES", span)
        assert await store.scan("b", ranges, limits) == expected
    await store.close()


async def test_depth_deltas_leave_one_update_at_a_time_and_are_read_back() -> None:
    sent: list[int] = []

    async def send(bucket: str, delta: int) -> None:
        await asyncio.sleep(0.02)
        sent.append(delta)

    deltas = DepthDeltas(send)
    for _ in range(50):
        deltas.add("q", 1)
        await asyncio.sleep(0.001)
    await deltas.settle("q")
    assert sum(sent) == 50 and len(sent) < 10  # coalesced while one was in flight
    await deltas.close()


async def test_a_depth_delta_riak_refused_is_sent_again_and_never_counted_twice() -> None:
    sent: list[int] = []
    refuse = True

    async def send(bucket: str, delta: int) -> None:
        if refuse:
            raise BackendUnavailable("down")
        sent.append(delta)

    deltas = DepthDeltas(send)
    deltas.add("q", 3)
    await asyncio.sleep(0)
    with pytest.raises(BackendUnavailable):
        await deltas.settle("q")
    refuse = False
    deltas.add("q", -1)
    await deltas.settle("q")
    assert sum(sent) == 2
    deltas.retry()
    await deltas.close()
    assert sum(sent) == 2


async def test_the_riak_bench_measures_both_halves_and_their_ratios() -> None:
    figures = await measure("http://riak:8098", n=40, size=64, concurrency=4, transport=RiakModel())
    assert figures["adapter GET per message"] == 1.0
    assert figures["adapter DELETE per message"] == 1.0
    assert figures["publish / raw put"] > 0 and figures["receive+delete / one get + one delete"] > 0


async def test_closing_with_updates_in_flight_ends_them_all() -> None:
    release = asyncio.Event()
    sent: list[int] = []

    async def send(bucket: str, delta: int) -> None:
        await release.wait()
        sent.append(delta)

    deltas = DepthDeltas(send)
    for bucket in ("a", "b", "c"):
        deltas.add(bucket, 1)
    await asyncio.sleep(0)
    asyncio.get_running_loop().call_later(0.05, release.set)
    await deltas.close()
    assert sorted(sent) == [1, 1, 1]
