"""A queue's max_depth: publishes past it are refused whole (reject-publish) and the
queue keeps what it had, over v2, v1 and topics, on every store."""

from __future__ import annotations

from typing import Any

from tests.api.documented import Http, call, depth, receive


async def _publish(http: Http, spec: dict[str, Any], path: str, n: int, status: int) -> Any:
    body = {"messages": [{"body": f"m{i}"} for i in range(n)]}
    return await call(http, spec, "POST", path, status, body)


async def test_a_full_queue_refuses_a_publish_whole_until_consumers_make_room(
    http: Http, spec: dict[str, Any]
) -> None:
    made = await call(http, spec, "PUT", "/v2/queues/q", 201, {"max_depth": 3})
    assert made["settings"]["max_depth"] == 3
    path = "/v2/queues/q/messages"
    await _publish(http, spec, path, 2, 200)
    full = await _publish(http, spec, path, 2, 429)  # 2 + 2 > 3: none of the two is stored
    assert full["error"] == "QUEUE_FULL" and "max_depth 3" in full["message"]
    assert await depth(http, spec, "q") == 2
    refused = await http.post(path, json={"messages": [{"body": "x"}, {"body": "y"}]})
    assert refused.status == 429 and refused.headers["Retry-After"] == "1"
    await _publish(http, spec, path, 1, 200)  # exactly full
    await _publish(http, spec, path, 1, 429)
    # a message in flight still counts; a deleted one makes room
    got = await receive(http, spec, "q", 1)
    await _publish(http, spec, path, 1, 429)
    await call(http, spec, "POST", "/v2/queues/q/delete", 200, {"ids": [got[0]["id"]]})
    await _publish(http, spec, path, 1, 200)
    assert await depth(http, spec, "q") == 3
    # null lifts the bound
    await call(http, spec, "PATCH", "/v2/queues/q", 200, {"max_depth": None})
    await _publish(http, spec, path, 5, 200)
    assert await depth(http, spec, "q") == 8


async def test_a_topic_publish_is_refused_when_a_queue_that_takes_it_is_full(
    http: Http, spec: dict[str, Any]
) -> None:
    await call(http, spec, "PUT", "/v2/queues/roomy", 201)
    await call(http, spec, "PUT", "/v2/queues/tight", 201, {"max_depth": 1})
    await call(http, spec, "PUT", "/v2/topics/t", 201)
    await call(http, spec, "PUT", "/v2/topics/t/subscriptions/roomy", 200)
    await call(http, spec, "PUT", "/v2/topics/t/subscriptions/tight", 200)
    await _publish(http, spec, "/v2/topics/t/messages", 1, 200)
    full = await _publish(http, spec, "/v2/topics/t/messages", 1, 429)
    assert full["error"] == "QUEUE_FULL"
    # no copy anywhere: a subscriber is never given what another was refused
    assert (await depth(http, spec, "roomy"), await depth(http, spec, "tight")) == (1, 1)
    # a queue the message does not go to does not hold it back
    await call(http, spec, "DELETE", "/v2/topics/t/subscriptions/tight", 200)
    await _publish(http, spec, "/v2/topics/t/messages", 1, 200)
    assert await depth(http, spec, "roomy") == 2


async def test_v1_publishes_to_a_full_queue_get_429(http: Http, spec: dict[str, Any]) -> None:
    await call(http, spec, "PUT", "/v2/queues/v1q", 201, {"max_depth": 1})
    assert (await http.put("/v1/queues/v1q/message", data=b"one")).status == 200
    refused = await http.put("/v1/queues/v1q/message", data=b"two")
    assert refused.status == 429 and refused.headers["Retry-After"] == "1"
    assert "max_depth 1" in (await refused.json())["error"]  # v1's envelope: the text
    assert await depth(http, spec, "v1q") == 1


async def test_bad_max_depths_are_refused_naming_the_field(
    http: Http, spec: dict[str, Any]
) -> None:
    for bad in (0, -1, 1.5, "10", 10**10):
        got = await call(http, spec, "PUT", "/v2/queues/b", 422, {"max_depth": bad})
        assert "max_depth" in got["message"], got
    await call(http, spec, "GET", "/v2/queues/b", 404)
