"""Every v1 route of the original, with its shapes, and its bugs fixed."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient

Http = TestClient[Any, Any]


async def _json(http: Http, method: str, path: str, status: int, **kw: Any) -> Any:
    response = await http.request(method, path, **kw)
    assert response.status == status, await response.text()
    return await response.json()


async def test_status_routes(http: Http) -> None:
    response = await http.get("/v1/status/servers")
    assert response.status == 200 and response.content_type == "text/plain"
    assert (await response.text()) == "Member: dynamiq1 127.0.0.1\n"
    assert await _json(http, "GET", "/v1/status/partitionrange", 200) == {
        "bottom": "0",
        "top": "9223372036854775807",
    }


async def test_queue_lifecycle(http: Http) -> None:
    assert await _json(http, "PUT", "/v1/queues/jobs", 201) == "created"
    assert (await _json(http, "PUT", "/v1/queues/jobs", 422))["error"] == "Queue already exists."
    assert await _json(http, "GET", "/v1/queues", 200) == {"queues": ["jobs"]}
    settings = await _json(http, "GET", "/v1/queues/jobs", 200)
    assert settings == {
        "visibility_timeout": 30.0,
        "min_partitions": 1,
        "max_partitions": 10,
        "max_partition_age": 432000.0,
        "compressed_messages": False,
        "VisibilityTimeout": 30.0,
        "MinPartitions": 1,
        "MaxPartitions": 10,
        "MaxPartitionAge": 432000.0,
        "CompressedMessages": False,
        "partitions": 1,
    }
    assert (
        await _json(
            http,
            "PATCH",
            "/v1/queues/jobs",
            200,
            json={"visibility_timeout": 5, "min_partitions": 2},
        )
        == "ok"
    )
    settings = await _json(http, "GET", "/v1/queues/jobs", 200)
    assert settings["visibility_timeout"] == 5 and settings["partitions"] == 2
    assert await _json(http, "DELETE", "/v1/queues/jobs", 200) == {"Deleted": True}
    assert await _json(http, "GET", "/v1/queues", 200) == {"queues": []}


async def test_unknown_queue_is_404_everywhere_and_never_created(http: Http) -> None:
    assert await _json(http, "GET", "/v1/queues/ghost", 404) == {
        "error": "There is no queue named ghost",
        "code": "QUEUE_NOT_FOUND",
    }
    for method, path in [
        ("PATCH", "/v1/queues/ghost"),
        ("DELETE", "/v1/queues/ghost"),
        ("PUT", "/v1/queues/ghost/message"),
        ("GET", "/v1/queues/ghost/messages/10"),
        ("GET", "/v1/queues/ghost/message/1"),
        ("DELETE", "/v1/queues/ghost/message/1"),
        ("DELETE", "/v1/queues/ghost/messages/1,2"),
    ]:
        body = await _json(http, method, path, 404, data=b"{}")
        assert body["code"] == "QUEUE_NOT_FOUND", (method, path)
    assert await _json(http, "GET", "/v1/queues", 200) == {"queues": []}


async def test_publish_receive_peek_delete(http: Http) -> None:
    await http.put("/v1/queues/q")
    response = await http.put("/v1/queues/q/message", data="héllo")
    assert response.status == 200 and response.content_type == "text/plain"
    mid = await response.text()
    assert mid.isdigit()
    peeked = await _json(http, "GET", f"/v1/queues/q/message/{mid}", 200)
    assert peeked == {"messages": [{"id": mid, "body": "héllo"}]}
    assert await _json(http, "GET", "/v1/queues/q/messages/10", 200) == [
        {"id": mid, "body": "héllo"}
    ]
    assert await _json(http, "GET", "/v1/queues/q/messages/10", 200) == []
    assert await _json(http, "DELETE", f"/v1/queues/q/message/{mid}", 200) is True
    assert await _json(http, "DELETE", f"/v1/queues/q/message/{mid}", 200) is False
    assert (await _json(http, "GET", f"/v1/queues/q/message/{mid}", 404))["code"] == (
        "MESSAGE_NOT_FOUND"
    )


async def test_multi_delete_counts_only_existing(http: Http) -> None:
    await http.put("/v1/queues/q")
    ids = [await (await http.put("/v1/queues/q/message", data=f"m{i}")).text() for i in range(3)]
    path = "/v1/queues/q/messages/" + ",".join([*ids, "42"])
    assert await _json(http, "DELETE", path, 200) == {"deleted": 3}


async def test_bad_batch_size_is_422_and_runs_no_receive(http: Http) -> None:
    await http.put("/v1/queues/q")
    await http.put("/v1/queues/q/message", data="keep")
    for bad in ("0", "-1", "abc", "101", "1.5"):
        body = await _json(http, "GET", f"/v1/queues/q/messages/{bad}", 422)
        assert "batch size" in body["error"]
    # Nothing was leased by the rejected requests.
    assert [m["body"] for m in await _json(http, "GET", "/v1/queues/q/messages/5", 200)] == ["keep"]


async def test_empty_and_binary_bodies(http: Http) -> None:
    await http.put("/v1/queues/q")
    empty = await (await http.put("/v1/queues/q/message", data=b"")).text()
    raw = await (await http.put("/v1/queues/q/message", data=b"\xff\xfeok")).text()
    got = {m["id"]: m["body"] for m in await _json(http, "GET", "/v1/queues/q/messages/5", 200)}
    assert got == {empty: "", raw: "\ufffd\ufffdok"}


async def test_topics(http: Http) -> None:
    assert await _json(http, "PUT", "/v1/topics/news", 201) == {"Queues": []}
    assert (await _json(http, "PUT", "/v1/topics/news", 422))["error"] == "Topic already exists."
    assert await _json(http, "GET", "/v1/topics", 200) == {"topics": ["news"]}
    assert "create it first" in (await _json(http, "PUT", "/v1/topics/news/queues/a", 422))["error"]
    assert "create it first" in (await _json(http, "PUT", "/v1/topics/none/queues/a", 422))["error"]
    await http.put("/v1/queues/a")
    await http.put("/v1/queues/b")
    assert await _json(http, "PUT", "/v1/topics/news/queues/b", 200) == {"Queues": ["b"]}
    assert await _json(http, "PUT", "/v1/topics/news/queues/a", 200) == {"Queues": ["a", "b"]}
    assert await _json(http, "PUT", "/v1/topics/news/queues/a", 200) == {"Queues": ["a", "b"]}
    assert await _json(http, "GET", "/v1/topics/news", 200) == {"Queues": ["a", "b"]}
    ids = await _json(http, "PUT", "/v1/topics/news/message", 200, data=b"extra")
    assert set(ids) == {"a", "b"} and ids["a"] != ids["b"]
    for queue in ("a", "b"):
        got = await _json(http, "GET", f"/v1/queues/{queue}/messages/5", 200)
        assert got == [{"id": ids[queue], "body": "extra"}]
    assert await _json(http, "DELETE", "/v1/topics/news/queues/a", 200) == {"Queues": ["b"]}
    assert await _json(http, "DELETE", "/v1/topics/news", 200) == {"Deleted": True}
    assert await _json(http, "GET", "/v1/topics", 200) == {"topics": []}


async def test_unknown_topic_is_404_and_never_created(http: Http) -> None:
    for method, path in [
        ("GET", "/v1/topics/ghost"),
        ("DELETE", "/v1/topics/ghost"),
        ("DELETE", "/v1/topics/ghost/queues/a"),
        ("PUT", "/v1/topics/ghost/message"),
    ]:
        assert (await _json(http, method, path, 404))["code"] == "TOPIC_NOT_FOUND", path
    assert await _json(http, "GET", "/v1/topics", 200) == {"topics": []}


async def test_a_topic_without_subscribers_publishes_nothing(http: Http) -> None:
    await http.put("/v1/topics/quiet")
    assert await _json(http, "PUT", "/v1/topics/quiet/message", 200, data=b"x") == {}


async def test_deleting_a_queue_deletes_its_messages_and_subscriptions(http: Http) -> None:
    await http.put("/v1/queues/q")
    await http.put("/v1/topics/t")
    await http.put("/v1/topics/t/queues/q")
    await http.put("/v1/queues/q/message", data="old")
    await http.delete("/v1/queues/q")
    assert await _json(http, "GET", "/v1/topics/t", 200) == {"Queues": []}
    await http.put("/v1/queues/q")
    assert await _json(http, "GET", "/v1/queues/q/messages/10", 200) == []


async def test_unknown_routes_and_methods_use_the_envelope(http: Http) -> None:
    body = await _json(http, "GET", "/v1/nothing", 404)
    assert body["code"] == "NOT_FOUND"
    body = await _json(http, "POST", "/v1/queues/q", 405)
    assert body["code"] == "METHOD_NOT_ALLOWED"


async def test_patch_ignores_unknown_keys_and_applies_the_known_ones(http: Http) -> None:
    # The original client's README example misspells min_partitions; Go ignored it.
    await _json(http, "PUT", "/v1/queues/jobs", 201)
    body = {"visibility_timeout": 7, "min_partiitions": 3, "max_partitions": 4}
    assert await _json(http, "PATCH", "/v1/queues/jobs", 200, json=body) == "ok"
    settings = await _json(http, "GET", "/v1/queues/jobs", 200)
    assert settings["visibility_timeout"] == settings["VisibilityTimeout"] == 7
    assert settings["min_partitions"] == settings["MinPartitions"] == 1
    assert "min_partiitions" not in settings


async def test_patch_with_only_unknown_keys_changes_nothing_and_still_validates(
    http: Http,
) -> None:
    await _json(http, "PUT", "/v1/queues/jobs", 201)
    assert await _json(http, "PATCH", "/v1/queues/jobs", 200, json={"colour": "red"}) == "ok"
    bad = {"colour": "red", "min_partitions": 0}
    assert (await _json(http, "PATCH", "/v1/queues/jobs", 422, json=bad))["code"] == "INVALID"
    assert (await _json(http, "GET", "/v1/queues/jobs", 200))["min_partitions"] == 1


async def test_queue_settings_in_both_eras_spellings(http: Http) -> None:
    await _json(http, "PUT", "/v1/queues/jobs", 201)
    body = {"min_partitions": 2, "max_partitions": 5, "compressed_messages": True}
    await _json(http, "PATCH", "/v1/queues/jobs", 200, json=body)
    settings = await _json(http, "GET", "/v1/queues/jobs", 200)
    # The original's final version echoed the minimum as MaxPartitions: not kept.
    assert (settings["MinPartitions"], settings["MaxPartitions"]) == (2, 5)
    assert settings["CompressedMessages"] is settings["compressed_messages"] is True
    assert settings["MaxPartitionAge"] == settings["max_partition_age"]
