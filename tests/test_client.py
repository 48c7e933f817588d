"""The Python client against a real node: every call, and errors as exception classes."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dynamiq.client import AsyncClient
from dynamiq.errors import BackendUnavailable, Invalid, QueueExists, QueueNotFound, TopicNotFound

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
