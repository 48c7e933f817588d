"""Wide fan-outs over v2, on every store: a message for more than ``limits.syncfanout``
queues is answered once stored once, and its copies follow under the answered ids."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.documented import Http, call, receive
from tests.conftest import node_client_with, store_flags
from tests.waiting import eventually

QUEUES = [f"q{i}" for i in range(6)]


@pytest.fixture(params=["lmdb", "redis", "redis-cluster"])
async def http(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Http]:
    """A node that makes at most two copies of a message before its answer (in place of
    the usual node, so the OpenAPI document is read from it)."""
    flags = await store_flags(request, tmp_path)
    async with await node_client_with({**flags, "limits.syncfanout": "2"}) as client:
        yield client


async def _subscribed(http: Http, spec: dict[str, Any], settings: dict[str, Any]) -> None:
    await call(http, spec, "PUT", "/v2/topics/t", 201)
    for queue in QUEUES:
        await call(http, spec, "PUT", f"/v2/queues/{queue}", 201, settings.get(queue))
        await call(http, spec, "PUT", f"/v2/topics/t/subscriptions/{queue}", 200)


async def test_every_queue_gets_its_copy_under_the_answered_id(
    http: Http, spec: dict[str, Any]
) -> None:
    await _subscribed(http, spec, {"q5": {"delay_seconds": 0.2}, "q4": {"max_depth": 10}})
    message = {"body": "hello", "attributes": {"k": "v"}}
    answer = await call(http, spec, "POST", "/v2/topics/t/messages", 200, {"messages": [message]})
    ids = {queue: mids[0] for queue, mids in answer["ids"].items()}
    assert sorted(ids) == QUEUES
    spread = {ids[q] for q in QUEUES[:4]}
    assert len(spread) == 1  # the spread's copies share its one id
    for queue in QUEUES:

        async def copied(q: str = queue) -> list[dict[str, Any]]:
            return await receive(http, spec, q)

        got = await eventually(copied, what=f"a copy in {queue}")
        assert [(m["id"], m["body"], m["attributes"]) for m in got] == [
            (ids[queue], "hello", {"k": "v"})
        ]


async def test_each_message_of_a_batch_is_spread_on_its_own(
    http: Http, spec: dict[str, Any]
) -> None:
    await _subscribed(http, spec, {})
    batch = {"messages": [{"body": "one"}, {"body": "two"}]}
    answer = await call(http, spec, "POST", "/v2/topics/t/messages", 200, batch)
    for queue in QUEUES:
        first, second = answer["ids"][queue]
        assert first != second
        got: list[dict[str, Any]] = []

        async def both(q: str = queue, into: list[dict[str, Any]] = got) -> bool:
            into.extend(await receive(http, spec, q))
            return len(into) >= 2

        await eventually(both, what=f"two copies in {queue}")
        assert sorted((m["id"], m["body"]) for m in got) == sorted(
            [(first, "one"), (second, "two")]
        )
