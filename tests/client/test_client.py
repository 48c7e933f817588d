"""The Python client against a real node: every call, and errors as exception classes."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dynamiq.client import AsyncClient
from dynamiq.client.transport import Transport
from dynamiq.errors import BackendUnavailable, Invalid, QueueExists, QueueNotFound, TopicNotFound
from dynamiq.models import AttributeValue, Outgoing

Http = TestClient[Any, Any]


@pytest.fixture
async def client(http: Http) -> Any:
    async with AsyncClient(str(http.make_url(""))) as c:
        yield c


async def test_round_trip_of_text_and_bytes(client: AsyncClient) -> None:
    await client.create_queue("c", visibility_timeout=5)
    ids = await client.publish("c", ["text", b"\x00\xffbytes", "ünïcode".encode()])
    got = await client.receive("c", 10, wait_seconds=1)
    assert [m.id for m in got] == ids
    assert [m.body for m in got] == [b"text", b"\x00\xffbytes", "ünïcode".encode()]
    assert (await client.peek("c", ids[1])).body == b"\x00\xffbytes"
    assert await client.delete("c", [*ids, 1]) == ids
    assert (await client.queue("c"))["stats"]["depth"] == 0


async def test_admin_calls(client: AsyncClient) -> None:
    await client.create_queue("a")
    await client.create_queue("b")
    await client.create_topic("t")
    assert await client.subscribe("t", "a") == ["a"]
    assert await client.subscribe("t", "b") == ["a", "b"]
    ids = await client.publish_topic("t", ["x"])
    assert sorted(ids) == ["a", "b"]
    assert await client.unsubscribe("t", "a") == ["b"]
    assert (await client.configure_queue("a", max_partitions=3))["settings"]["max_partitions"] == 3
    assert await client.queues() == ["a", "b"] and await client.topics() == ["t"]
    await client.delete_topic("t")
    await client.delete_queue("a")
    assert await client.queues() == ["b"]


async def test_listings_come_page_after_page(client: AsyncClient) -> None:
    for name in ("a", "ab", "b"):
        await client.create_queue(name)
        await client.create_topic(f"t-{name}")
    assert await client.queues(page_size=1) == ["a", "ab", "b"]
    assert await client.queues("a", page_size=2) == ["a", "ab"]
    assert await client.topics("t-a", page_size=1) == ["t-a", "t-ab"]


async def test_stats_read_every_page_and_sum_every_queue_once(client: AsyncClient) -> None:
    for i, name in enumerate(("a", "ab", "b", "c")):
        await client.create_queue(name)
        await client.publish(name, ["x"] * (i + 1))
    whole = await client.stats(page_size=1)
    assert [q["queue"] for q in whole["queues"]] == ["a", "ab", "b", "c"]
    assert [q["depth"] for q in whole["queues"]] == [1, 2, 3, 4]
    assert whole["totals"]["depth"] == 10 and whole["totals"]["in_flight"] == 0
    part = await client.stats("a", page_size=1)  # a prefix: the pages' own sums
    assert part["totals"]["depth"] == 3 and part["totals"]["scope"] == "page"


async def test_errors_arrive_as_their_classes(client: AsyncClient) -> None:
    with pytest.raises(QueueNotFound):
        await client.receive("nope")
    with pytest.raises(TopicNotFound):
        await client.publish_topic("nope", ["x"])
    await client.create_queue("e")
    with pytest.raises(QueueExists):
        await client.create_queue("e")
    with pytest.raises(Invalid) as caught:
        await client.receive("e", 0)
    assert caught.value.status == 422 and "max_messages" in caught.value.message


async def test_an_unreachable_node_is_backend_unavailable() -> None:
    async with AsyncClient("http://127.0.0.1:9", timeout=2) as c:
        with pytest.raises(BackendUnavailable):
            await c.queues()


async def test_change_visibility(client: AsyncClient) -> None:
    await client.create_queue("v", visibility_timeout=30)
    ids = await client.publish("v", ["x", "y"])
    got = await client.receive("v", 2)
    assert [m.id for m in got] == ids
    assert await client.change_visibility("v", [ids[0], 5], 120) == [ids[0]]
    assert await client.change_visibility("v", [ids[1]], 0) == [ids[1]]
    assert [m.id for m in await client.receive("v", 5)] == [ids[1]]
    with pytest.raises(Invalid):
        await client.change_visibility("v", [ids[0]], -1)


async def test_fails_over_to_a_live_node(lmdb_http: Http, down_urls: list[str]) -> None:
    live, dead = str(lmdb_http.make_url("")).rstrip("/"), down_urls
    async with AsyncClient([dead[0], live, dead[1]], rounds=1, backoff=0.01) as client:
        # Whatever order the shuffle chose, every call reaches the live node
        await client.create_queue("fo")
        ids = [i for _ in range(3) for i in await client.publish("fo", ["x"])]
        assert len(set(ids)) == 3
        assert client.url == live


async def test_gives_up_after_every_node_failed_its_rounds(
    down_urls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rests: list[float] = []

    async def rest(_: Transport, seconds: float) -> None:
        rests.append(seconds)

    monkeypatch.setattr(Transport, "rest", rest)
    async with AsyncClient(",".join(down_urls), rounds=3, backoff=0.05, timeout=2) as client:
        with pytest.raises(BackendUnavailable):
            await client.queues()
    # Three rounds of both nodes, a backoff after each failed round but the last,
    # doubling: 0.05 s, then 0.1 s
    assert rests == [0.05, 0.1]


def test_nodes_come_from_dynamiq_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNAMIQ_HOSTS", "http://a:1/, http://b:2")
    client = AsyncClient()
    assert client.url in {"http://a:1", "http://b:2"}
    with pytest.raises(ValueError, match="no node URL"):
        AsyncClient(" , ")


async def test_attributes_routing_and_filters_through_the_client(client: AsyncClient) -> None:
    for queue in ("all", "eu"):
        await client.create_queue(queue)
    await client.create_topic("orders")
    await client.subscribe("orders", "all")
    await client.subscribe(
        "orders", "eu", pattern="orders.eu.*", filter_policy={"tier": [{"prefix": "gold"}]}
    )
    assert await client.subscriptions("orders") == [
        {"queue": "all"},
        {"queue": "eu", "pattern": "orders.eu.*", "filter": {"tier": [{"prefix": "gold"}]}},
    ]
    attributes: dict[str, AttributeValue] = {"tier": "gold-plus", "n": 2, "raw": b"\x00\xff"}
    ids = await client.publish_topic(
        "orders",
        ["eu gold", Outgoing(b"us", routing_key="orders.us.created")],
        routing_key="orders.eu.created",
        attributes=attributes,
    )
    assert ids["eu"][1] is None and None not in ids["all"]
    (got,) = await client.receive("eu", 10)
    assert (got.body, got.attributes, got.routing_key) == (
        b"eu gold",
        attributes,
        "orders.eu.created",
    )


async def test_dedup_ids_and_duplicates_through_the_client(client: AsyncClient) -> None:
    await client.create_queue("once")
    await client.create_topic("t")
    await client.subscribe("t", "once")
    first = await client.publish("once", [Outgoing(b"a", dedup_id="a"), "plain"])
    assert first.duplicate == []
    again = await client.publish(
        "once", [Outgoing(b"a", dedup_id="a"), Outgoing(b"b", dedup_id="b")]
    )
    assert again[0] == first[0] and again.duplicate == [True, False]
    fanned = await client.publish_topic("t", [Outgoing(b"b", dedup_id="b"), "x"])
    assert fanned["once"][0] == again[1] and fanned["once"].duplicate == [True, False]


async def test_publish_carries_the_current_trace_context(client: AsyncClient) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    await client.create_queue("traced")
    tracer = TracerProvider().get_tracer("test")
    await client.publish("traced", ["outside"])
    with tracer.start_as_current_span("publish") as span:
        await client.publish(
            "traced", ["inside", Outgoing(b"own", attributes={"traceparent": "x"})]
        )
        context = span.get_span_context()
    got = {m.body: m.attributes for m in await client.receive("traced", 10)}
    expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    assert got == {
        b"outside": None,
        b"inside": {"traceparent": expected},
        b"own": {"traceparent": "x"},
    }
