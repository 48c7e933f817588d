"""The v2 batch API; every response is checked against the served OpenAPI document."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dynamiq.config import LimitsSettings
from dynamiq.config.sources import load_settings
from dynamiq.core.clock import FakeClock
from dynamiq.testing.server import node_client
from tests.api.documented import Http, call
from tests.conftest import node_client_with, under_way


async def test_publish_receive_delete_in_batches(http: Http, spec: dict[str, Any]) -> None:
    created = await call(http, spec, "PUT", "/v2/queues/jobs", 201, {"visibility_timeout": 10})
    assert created["settings"]["visibility_timeout"] == 10
    bodies = [f"job {i}" for i in range(30)]
    ids = (
        await call(
            http,
            spec,
            "POST",
            "/v2/queues/jobs/messages",
            200,
            {"messages": [{"body": b} for b in bodies]},
        )
    )["ids"]
    assert len(set(ids)) == 30
    got = (await call(http, spec, "POST", "/v2/queues/jobs/receive", 200, {"max_messages": 20}))[
        "messages"
    ]
    assert [m["id"] for m in got] == ids[:20] and [m["body"] for m in got] == bodies[:20]
    info = await call(http, spec, "GET", "/v2/queues/jobs", 200)
    assert info["stats"] == {"depth": 30, "in_flight": 20, "partitions": 1}
    result = await call(
        http, spec, "POST", "/v2/queues/jobs/delete", 200, {"ids": [m["id"] for m in got] + ["5"]}
    )
    assert result == {"deleted": [m["id"] for m in got], "missing": ["5"]}
    rest = (await call(http, spec, "POST", "/v2/queues/jobs/receive", 200, {"max_messages": 50}))[
        "messages"
    ]
    assert [m["id"] for m in rest] == ids[20:]


async def test_a_purge_drops_what_was_published_before_it(http: Http, spec: dict[str, Any]) -> None:
    await call(http, spec, "PUT", "/v2/queues/p", 201)
    old = {"messages": [{"body": f"old {i}"} for i in range(5)]}
    await call(http, spec, "POST", "/v2/queues/p/messages", 200, old)
    leased = (await call(http, spec, "POST", "/v2/queues/p/receive", 200, {"max_messages": 2}))[
        "messages"
    ]
    assert await call(http, spec, "POST", "/v2/queues/p/purge", 200) == {"purged": 5}
    new = {"messages": [{"body": "new"}]}
    (kept,) = (await call(http, spec, "POST", "/v2/queues/p/messages", 200, new))["ids"]
    got = await call(http, spec, "POST", "/v2/queues/p/receive", 200, {"max_messages": 10})
    assert [m["id"] for m in got["messages"]] == [kept]
    ids = [m["id"] for m in leased]
    assert await call(http, spec, "POST", "/v2/queues/p/delete", 200, {"ids": ids}) == {
        "deleted": [],
        "missing": ids,
    }
    info = await call(http, spec, "GET", "/v2/queues/p", 200)
    assert info["stats"]["depth"] == 1 and info["stats"]["in_flight"] == 1
    await call(http, spec, "POST", "/v2/queues/nope/purge", 404)


async def test_binary_bodies_round_trip(http: Http, spec: dict[str, Any]) -> None:
    await call(http, spec, "PUT", "/v2/queues/bin", 201)
    raw = bytes(range(256))
    wire = base64.b64encode(raw).decode()
    (mid,) = (
        await call(
            http,
            spec,
            "POST",
            "/v2/queues/bin/messages",
            200,
            {"messages": [{"body": wire, "encoding": "base64"}]},
        )
    )["ids"]
    peeked = (await call(http, spec, "GET", f"/v2/queues/bin/messages/{mid}", 200))["message"]
    assert peeked["encoding"] == "base64" and base64.b64decode(peeked["body"]) == raw
    (got,) = (
        await call(
            http,
            spec,
            "POST",
            "/v2/queues/bin/receive",
            200,
            {"max_messages": 1, "encoding": "base64"},
        )
    )["messages"]
    assert base64.b64decode(got["body"]) == raw


async def test_visibility_override(http: Http, spec: dict[str, Any]) -> None:
    await call(http, spec, "PUT", "/v2/queues/v", 201)
    await call(http, spec, "POST", "/v2/queues/v/messages", 200, {"messages": [{"body": "x"}]})
    first = await call(
        http,
        spec,
        "POST",
        "/v2/queues/v/receive",
        200,
        {"max_messages": 1, "visibility_timeout": 0.3},
    )
    assert len(first["messages"]) == 1
    # Long poll until the short lease ends: the message comes back without a publish.
    again = await call(
        http, spec, "POST", "/v2/queues/v/receive", 200, {"max_messages": 1, "wait_seconds": 3}
    )
    assert again["messages"][0]["id"] == first["messages"][0]["id"]
    # A lease of 0: visible again at once, to the very next receive
    await call(http, spec, "POST", "/v2/queues/v/messages", 200, {"messages": [{"body": "y"}]})
    body = {"max_messages": 1, "visibility_timeout": 0}
    gone = await call(http, spec, "POST", "/v2/queues/v/receive", 200, body)
    back = await call(http, spec, "POST", "/v2/queues/v/receive", 200, {"max_messages": 1})
    seen = [(m["body"], m["receive_count"]) for m in gone["messages"] + back["messages"]]
    assert seen == [("y", 1), ("y", 2)]


@pytest.fixture
async def patient(tmp_path: Path, no_poll_ticks: None) -> AsyncIterator[tuple[Http, Any]]:
    """A node whose receives may wait a minute, and look at their queue again only when
    woken (``no_poll_ticks``); with its OpenAPI document."""
    flags = {"storage.path": str(tmp_path / "data"), "limits.maxwaitseconds": "60"}
    client = await node_client_with(flags)
    try:
        yield client, await (await client.get("/v2/openapi.json")).json()
    finally:
        await client.close()


async def test_long_poll_wakes_on_publish(patient: tuple[Http, Any]) -> None:
    http, spec = patient
    await call(http, spec, "PUT", "/v2/queues/lp", 201)
    poll = asyncio.create_task(
        call(
            http,
            spec,
            "POST",
            "/v2/queues/lp/receive",
            200,
            {"max_messages": 10, "wait_seconds": 60},
        )
    )
    await under_way(http, "the long poll under way")
    assert not poll.done()
    await call(http, spec, "POST", "/v2/queues/lp/messages", 200, {"messages": [{"body": "now"}]})
    # Only the publish can wake it before its minute is up: it looks at the queue
    # again only then (no periodic look)
    got = (await asyncio.wait_for(poll, 10))["messages"]
    assert [m["body"] for m in got] == ["now"]
    empty = await call(
        http, spec, "POST", "/v2/queues/lp/receive", 200, {"max_messages": 1, "wait_seconds": 0.3}
    )
    assert empty == {"messages": []}


async def test_a_queue_s_own_limits_wait_and_groups(patient: tuple[Http, Any]) -> None:
    http, spec = patient
    settings = {"receive_wait_seconds": 60, "max_message_bytes": 1024, "fifo": True}
    created = await call(http, spec, "PUT", "/v2/queues/own", 201, settings)
    assert {k: created["settings"][k] for k in settings} == settings
    for message, reason in (
        ({"body": "no group"}, "only messages with a group"),
        ({"body": "x" * 1025, "group": "g"}, "larger than the queue's max_message_bytes"),
    ):
        refused = await call(
            http, spec, "POST", "/v2/queues/own/messages", 422, {"messages": [message]}
        )
        assert refused["error"] == "INVALID" and reason in refused["message"]
    # A receive that names no wait waits the queue's (a minute); one that names 0 does not
    at_once = call(http, spec, "POST", "/v2/queues/own/receive", 200, {"wait_seconds": 0})
    assert (await asyncio.wait_for(at_once, 10))["messages"] == []
    poll = asyncio.create_task(call(http, spec, "POST", "/v2/queues/own/receive", 200, {}))
    await asyncio.sleep(0.5)
    assert not poll.done()  # still waiting, as the queue says
    body = {"messages": [{"body": "in order", "group": "g"}]}
    await call(http, spec, "POST", "/v2/queues/own/messages", 200, body)
    assert [m["body"] for m in (await asyncio.wait_for(poll, 10))["messages"]] == ["in order"]
    cleared = await call(http, spec, "PATCH", "/v2/queues/own", 200, {"max_message_bytes": None})
    assert cleared["settings"]["max_message_bytes"] is None


async def test_a_fifo_receive_takes_several_of_a_group_in_order(
    http: Http, spec: dict[str, Any]
) -> None:
    await call(http, spec, "PUT", "/v2/queues/ordered", 201, {"fifo": True})
    batch = {"messages": [{"body": f"{g}{i}", "group": g} for i in range(4) for g in "ab"]}
    await call(http, spec, "POST", "/v2/queues/ordered/messages", 200, batch)
    receive = {"max_messages": 6}
    got = (await call(http, spec, "POST", "/v2/queues/ordered/receive", 200, receive))["messages"]
    by_group = {g: [m["body"] for m in got if m["group"] == g] for g in "ab"}
    assert len(got) == 6 and all(
        v == [f"{g}{i}" for i, _ in enumerate(v)] for g, v in by_group.items()
    )
    # both groups are in flight: nothing more until their messages are gone
    again = await call(http, spec, "POST", "/v2/queues/ordered/receive", 200, receive)
    assert again == {"messages": []}
    await call(
        http, spec, "POST", "/v2/queues/ordered/delete", 200, {"ids": [m["id"] for m in got]}
    )
    rest = (await call(http, spec, "POST", "/v2/queues/ordered/receive", 200, receive))["messages"]
    assert sorted(m["body"] for m in rest) == sorted(
        f"{g}{i}" for g in "ab" for i in range(len(by_group[g]), 4)
    )


async def test_topics_fan_out(http: Http, spec: dict[str, Any]) -> None:
    for q in ("a", "b"):
        await call(http, spec, "PUT", f"/v2/queues/{q}", 201)
    created = await call(http, spec, "PUT", "/v2/topics/t", 201)
    assert created == {"name": "t", "queues": [], "subscriptions": []}
    await call(http, spec, "PUT", "/v2/topics/t/subscriptions/a", 200)
    assert (await call(http, spec, "PUT", "/v2/topics/t/subscriptions/b", 200))["queues"] == [
        "a",
        "b",
    ]
    ids = (
        await call(
            http,
            spec,
            "POST",
            "/v2/topics/t/messages",
            200,
            {"messages": [{"body": "1"}, {"body": "2"}]},
        )
    )["ids"]
    assert sorted(ids) == ["a", "b"] and all(len(v) == 2 for v in ids.values())
    for q in ("a", "b"):
        got = (await call(http, spec, "POST", f"/v2/queues/{q}/receive", 200, {"max_messages": 5}))[
            "messages"
        ]
        assert [m["id"] for m in got] == ids[q]
    assert await call(http, spec, "GET", "/v2/topics", 200) == {"topics": ["t"]}
    assert (await call(http, spec, "DELETE", "/v2/topics/t/subscriptions/a", 200))["queues"] == [
        "b"
    ]
    # a name no queue could have is refused, not taken as "not subscribed"
    await call(http, spec, "DELETE", "/v2/topics/t/subscriptions/%C3%A9", 422)
    described = await call(http, spec, "GET", "/v2/topics/t", 200)
    assert described == {"name": "t", "queues": ["b"], "subscriptions": [{"queue": "b"}]}
    await call(http, spec, "DELETE", "/v2/topics/t", 200)
    await call(http, spec, "GET", "/v2/topics/t", 404)


async def test_queue_admin(http: Http, spec: dict[str, Any]) -> None:
    await call(http, spec, "PUT", "/v2/queues/adm", 201)
    assert (await call(http, spec, "PUT", "/v2/queues/adm", 409))["error"] == "QUEUE_EXISTS"
    patched = await call(
        http,
        spec,
        "PATCH",
        "/v2/queues/adm",
        200,
        {"min_partitions": 3, "compressed_messages": True},
    )
    assert patched["settings"]["min_partitions"] == 3 and patched["stats"]["partitions"] == 3
    assert await call(http, spec, "GET", "/v2/queues", 200) == {"queues": ["adm"]}
    # JSON has one kind of number: 2048.0 is the integer its schema asks for; 2048.5 is not
    body = {"max_message_bytes": 2048.0}
    patched = await call(http, spec, "PATCH", "/v2/queues/adm", 200, body)
    assert patched["settings"]["max_message_bytes"] == 2048
    await call(http, spec, "PATCH", "/v2/queues/adm", 422, {"max_message_bytes": 2048.5})
    await call(http, spec, "DELETE", "/v2/queues/adm", 200)
    assert (await call(http, spec, "GET", "/v2/queues/adm", 404))["error"] == "QUEUE_NOT_FOUND"


async def test_a_store_failure_is_503_with_retry_after(lmdb_http: Http) -> None:
    # A closed embedded store stands for a failed one (tests/storage has Redis's outage).
    from dynamiq.process.wiring import STORE

    http = lmdb_http
    await http.put("/v2/queues/down")
    await http.put("/v2/topics/fan")
    await http.put("/v2/topics/fan/subscriptions/down")
    await http.app[STORE].close()
    for method, path, body in [
        ("POST", "/v2/queues/down/messages", {"messages": [{"body": "x"}]}),
        ("POST", "/v2/topics/fan/messages", {"messages": [{"body": "x"}]}),
        ("PUT", "/v1/topics/fan/message", None),
        ("POST", "/v2/queues/down/receive", {}),
        ("PUT", "/v1/queues/down/message", None),
    ]:
        response = await http.request(method, path, json=body)
        assert response.status == 503, await response.text()
        assert response.headers["Retry-After"].isdigit()
        assert (await response.json())["code" if path.startswith("/v1") else "error"] == (
            "BACKEND_UNAVAILABLE"
        )


@pytest.fixture
async def clocked(tmp_path: Path) -> AsyncIterator[tuple[Http, FakeClock]]:
    """A node on the embedded store whose clock moves only when the test says."""
    clock = FakeClock(time.time())  # wall time as today's: message ages stay meaningful
    settings = load_settings(
        env={}, flags={"core.httpport": "0", "storage.path": str(tmp_path / "clocked")}
    )
    client = await node_client(settings, clock)
    try:
        yield client, clock
    finally:
        await client.close()


async def test_queue_and_node_stats(clocked: tuple[Http, FakeClock]) -> None:
    http, clock = clocked
    spec = await (await http.get("/v2/openapi.json")).json()
    await call(http, spec, "PUT", "/v2/queues/s1", 201)
    await call(http, spec, "PUT", "/v2/queues/s2", 201)
    empty = await call(http, spec, "GET", "/v2/queues/s1/stats", 200)
    assert empty["depth"] == 0 and empty["oldest_age_seconds"] is None
    published_at = clock.t  # ids carry the publish time by the node's clock
    await call(
        http,
        spec,
        "POST",
        "/v2/queues/s1/messages",
        200,
        {"messages": [{"body": str(i)} for i in range(5)]},
    )
    clock.t = published_at + 0.2
    got = await call(http, spec, "POST", "/v2/queues/s1/receive", 200, {"max_messages": 2})
    stats = await call(http, spec, "GET", "/v2/queues/s1/stats", 200)
    assert (stats["depth"], stats["visible"], stats["in_flight"]) == (5, 3, 2)
    assert 0.199 <= stats["oldest_age_seconds"] <= 0.201
    assert stats["partitions"] == 1
    await call(
        http, spec, "POST", "/v2/queues/s1/delete", 200, {"ids": [m["id"] for m in got["messages"]]}
    )
    node = await call(http, spec, "GET", "/v2/stats", 200)
    assert [q["queue"] for q in node["queues"]] == ["s1", "s2"]
    assert node["totals"]["depth"] == 3 and node["totals"]["in_flight"] == 0
    assert node["members"] == 1
    clock.advance(1.1)  # the seconds that held the traffic are complete
    rates = (await call(http, spec, "GET", "/v2/queues/s1/stats", 200))["rates"]
    assert rates == {"publish": 0.5, "receive": 0.2, "delete": 0.2}  # per second over 10 s


async def test_peek_many_and_status(http: Http, spec: dict[str, Any]) -> None:
    await call(http, spec, "PUT", "/v2/queues/pk", 201)
    ids = (
        await call(
            http,
            spec,
            "POST",
            "/v2/queues/pk/messages",
            200,
            {"messages": [{"body": f"m{i}"} for i in range(4)]},
        )
    )["ids"]
    leased = await call(http, spec, "POST", "/v2/queues/pk/receive", 200, {"max_messages": 1})
    peeked = (await call(http, spec, "GET", "/v2/queues/pk/peek?max=3", 200))["messages"]
    # Oldest first, leased ones included, and nothing new is leased
    assert [m["id"] for m in peeked] == ids[:3]
    assert leased["messages"][0]["id"] == ids[0]
    got = await call(http, spec, "POST", "/v2/queues/pk/receive", 200, {"max_messages": 5})
    assert [m["id"] for m in got["messages"]] == ids[1:]
    kept = await call(
        http,
        spec,
        "POST",
        "/v2/queues/pk/visibility",
        200,
        {"ids": [ids[0], "3"], "visibility_timeout": 60},
    )
    assert kept == {"changed": [ids[0]], "not_leased": ["3"]}
    for bad in ("0", "x", "101"):
        assert (await call(http, spec, "GET", f"/v2/queues/pk/peek?max={bad}", 422))["error"] == (
            "INVALID"
        )
    status = await call(http, spec, "GET", "/v2/status", 200)
    assert status["node"] == "dynamiq1"
    assert status["members"][0]["slice"] == ["0", "9223372036854775807"]


@pytest.fixture
async def roomy(tmp_path: Path) -> AsyncIterator[tuple[Http, Any]]:
    """A node on its own limits of size (a request of 4 MiB, a message of 1 MiB)."""
    limits = LimitsSettings()
    assert (limits.maxbodybytes, limits.maxmessagebytes) == (4 << 20, 1 << 20)
    flags = {
        "storage.path": str(tmp_path / "data"),
        "limits.maxbodybytes": str(limits.maxbodybytes),
    }
    client = await node_client_with(flags)
    try:
        yield client, await (await client.get("/v2/openapi.json")).json()
    finally:
        await client.close()


async def test_a_message_of_one_mebibyte_goes_through_a_queue_and_a_topic(
    roomy: tuple[Http, Any],
) -> None:
    """Body and attributes of 1 MiB are taken; one byte more is refused, naming the limit."""
    http, spec = roomy
    await call(http, spec, "PUT", "/v2/queues/big", 201)
    await call(http, spec, "PUT", "/v2/topics/wide", 201)
    await call(http, spec, "PUT", "/v2/topics/wide/subscriptions/big", 200)
    body = "b" * ((1 << 20) - len("kind") - len("large"))
    message = {"body": body, "attributes": {"kind": "large"}}
    await call(http, spec, "POST", "/v2/queues/big/messages", 200, {"messages": [message]})
    await call(http, spec, "POST", "/v2/topics/wide/messages", 200, {"messages": [message]})
    receive = {"max_messages": 10}
    got = (await call(http, spec, "POST", "/v2/queues/big/receive", 200, receive))["messages"]
    assert [(m["body"], m["attributes"]) for m in got] == [(body, {"kind": "large"})] * 2
    over = {"messages": [{**message, "body": body + "b"}]}
    for path in ("/v2/queues/big/messages", "/v2/topics/wide/messages"):
        refused = await call(http, spec, "POST", path, 422, over)
        assert "limits.maxmessagebytes" in refused["message"]


async def test_attribute_types_travel_with_a_message(http: Http, spec: dict[str, Any]) -> None:
    await call(http, spec, "PUT", "/v2/queues/typed", 201)
    message = {
        "body": "b",
        "attributes": {"id": 9007199254740993, "price": "1.50", "gif": {"base64": "R0lG"}},
        "attribute_types": {"id": "Number.java.lang.Long", "price": "Number", "gif": "Binary.gif"},
    }
    await call(http, spec, "POST", "/v2/queues/typed/messages", 200, {"messages": [message]})
    (got,) = (await call(http, spec, "POST", "/v2/queues/typed/receive", 200, {}))["messages"]
    assert got["attributes"] == message["attributes"]
    assert got["attribute_types"] == message["attribute_types"]
    for types, field in (
        ({"absent": "String"}, "attribute_types.absent"),  # names no attribute
        ({"gif": "Number"}, "attribute_types.gif"),  # bytes are Binary
        ({"id": "Binary.x"}, "attribute_types.id"),
    ):
        bad = {"messages": [{**message, "attribute_types": types}]}
        refused = await call(http, spec, "POST", "/v2/queues/typed/messages", 422, bad)
        assert refused["error"] == "INVALID" and refused["message"].startswith(field)
