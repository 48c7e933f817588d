"""Deduplication and ordered groups over v2, on every store; every answer checked
against the OpenAPI document."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.documented import Http, call, depth, publish

# Three messages with one dedup id: two in different groups, one in none.
ONE_ID_IN_TWO_GROUPS_AND_NONE = (
    {"body": "a", "dedup_id": "d", "group": "g1"},
    {"body": "b", "dedup_id": "d", "group": "g2"},
    {"body": "c", "dedup_id": "d"},
)


async def test_a_repeated_dedup_id_answers_the_first_id_and_stores_nothing(
    http: Http, spec: dict[str, Any]
) -> None:
    await call(http, spec, "PUT", "/v2/queues/q", 201)
    path = "/v2/queues/q/messages"
    first = await publish(http, spec, path, {"body": "a", "dedup_id": "order-1"})
    assert "duplicate" not in first
    again = await publish(
        http,
        spec,
        path,
        {"body": "a, sent again", "dedup_id": "order-1"},
        {"body": "b", "dedup_id": "order-2"},
        {"body": "b, in the same batch", "dedup_id": "order-2"},
        {"body": "no id"},
    )
    assert again["ids"][0] == first["ids"][0] and again["ids"][2] == again["ids"][1]
    assert again["duplicate"] == [True, False, True, False]
    assert await depth(http, spec, "q") == 3
    got = await call(http, spec, "POST", "/v2/queues/q/receive", 200, {"max_messages": 10})
    assert sorted(m["body"] for m in got["messages"]) == ["a", "b", "no id"]
    metrics = await (await http.get("/metrics")).text()
    assert 'dynamiq_messages_deduplicated_total{queue="q"} 2.0' in metrics


async def test_a_dedup_id_holds_across_the_queue_s_groups_by_default(
    http: Http, spec: dict[str, Any]
) -> None:
    created = await call(http, spec, "PUT", "/v2/queues/q", 201)
    assert created["settings"]["dedup_scope"] == "queue"
    path = "/v2/queues/q/messages"
    first = await publish(http, spec, path, *ONE_ID_IN_TWO_GROUPS_AND_NONE)
    assert first["duplicate"] == [False, True, True] and len(set(first["ids"])) == 1
    again = await publish(http, spec, path, {"body": "d", "dedup_id": "d", "group": "g3"})
    assert again == {"ids": first["ids"][:1], "duplicate": [True]}
    assert await depth(http, spec, "q") == 1


async def test_a_grouped_message_s_dedup_id_is_scoped_to_its_group_when_asked(
    http: Http, spec: dict[str, Any]
) -> None:
    created = await call(http, spec, "PUT", "/v2/queues/q", 201, {"dedup_scope": "group"})
    assert created["settings"]["dedup_scope"] == "group"
    path = "/v2/queues/q/messages"
    first = await publish(http, spec, path, *ONE_ID_IN_TWO_GROUPS_AND_NONE)
    assert "duplicate" not in first and len(set(first["ids"])) == 3
    again = await publish(
        http,
        spec,
        path,
        {"body": "b again", "dedup_id": "d", "group": "g2"},
        {"body": "c again", "dedup_id": "d"},
        {"body": "a again", "dedup_id": "d", "group": "g1"},
    )
    assert again["duplicate"] == [True, True, True]
    assert again["ids"] == [first["ids"][1], first["ids"][2], first["ids"][0]]
    assert await depth(http, spec, "q") == 3


async def test_content_dedup_and_the_window_are_queue_settings(
    http: Http, spec: dict[str, Any]
) -> None:
    settings = {"content_dedup": True, "dedup_window_seconds": 60}
    created = await call(http, spec, "PUT", "/v2/queues/q", 201, settings)
    assert {k: created["settings"][k] for k in settings} == settings
    path = "/v2/queues/q/messages"
    await publish(http, spec, path, {"body": "same", "attributes": {"k": "v"}})
    again = await publish(
        http,
        spec,
        path,
        {"body": "same", "attributes": {"k": "v"}},
        {"body": "same", "attributes": {"k": "w"}},
    )
    assert again["duplicate"] == [True, False]
    assert await depth(http, spec, "q") == 2


async def test_a_topic_publish_is_deduplicated_per_subscribed_queue(
    http: Http, spec: dict[str, Any]
) -> None:
    for queue in ("a", "b"):
        await call(http, spec, "PUT", f"/v2/queues/{queue}", 201)
    await call(http, spec, "PUT", "/v2/topics/t", 201)
    await call(http, spec, "PUT", "/v2/topics/t/subscriptions/a", 200)
    path = "/v2/topics/t/messages"
    # The message reaches queue a alone first: b has not seen its id.
    await publish(http, spec, "/v2/queues/a/messages", {"body": "x", "dedup_id": "d"})
    await call(http, spec, "PUT", "/v2/topics/t/subscriptions/b", 200)
    answer = await publish(http, spec, path, {"body": "x", "dedup_id": "d"})
    assert answer["duplicate"] == {"a": [True]}
    assert set(answer["ids"]) == {"a", "b"}
    assert await depth(http, spec, "a") == 1 and await depth(http, spec, "b") == 1
    assert "duplicate" not in await publish(http, spec, path, {"body": "y", "dedup_id": "e"})


@pytest.mark.parametrize(
    ("message", "named"),
    [
        ({"body": "x", "dedup_id": ""}, "dedup_id"),
        ({"body": "x", "dedup_id": "has space"}, "dedup_id"),
        ({"body": "x", "dedup_id": "d" * 129}, "dedup_id"),
        ({"body": "x", "dedup_id": 7}, "dedup_id"),
    ],
)
async def test_bad_dedup_ids_are_refused_naming_the_field_and_store_nothing(
    http: Http, spec: dict[str, Any], message: dict[str, Any], named: str
) -> None:
    await call(http, spec, "PUT", "/v2/queues/q", 201)
    body = {"messages": [{"body": "fine", "dedup_id": "ok"}, message]}
    error = await call(http, spec, "POST", "/v2/queues/q/messages", 422, body)
    assert named in error["message"]
    assert await depth(http, spec, "q") == 0
    # Nothing was claimed either: the good message's id stores now.
    ok = await publish(http, spec, "/v2/queues/q/messages", {"body": "fine", "dedup_id": "ok"})
    assert "duplicate" not in ok


@pytest.mark.parametrize(
    "settings",
    [
        {"dedup_window_seconds": 0},
        {"dedup_window_seconds": 86401},
        {"content_dedup": "yes"},
        {"expires_after_seconds": 59},
        {"expires_after_seconds": "soon"},
    ],
)
async def test_bad_dedup_and_expiry_settings_are_refused_naming_the_field(
    http: Http, spec: dict[str, Any], settings: dict[str, Any]
) -> None:
    error = await call(http, spec, "PUT", "/v2/queues/q", 422, settings)
    (name,) = settings
    assert name in error["message"]
    await call(http, spec, "GET", "/v2/queues/q", 404)


async def test_a_group_is_delivered_in_order_a_receive_s_worth_at_a_time(
    http: Http, spec: dict[str, Any]
) -> None:
    await call(http, spec, "PUT", "/v2/queues/q", 201, {"visibility_timeout": 60})
    path = "/v2/queues/q/messages"
    published = await publish(
        http,
        spec,
        path,
        *({"body": f"{g}{i}", "group": g, "dedup_id": f"{g}{i}"} for i in range(3) for g in "ab"),
        {"body": "free"},
    )
    assert "duplicate" not in published
    seen: list[list[str]] = []
    for _ in range(3):
        got = await call(http, spec, "POST", "/v2/queues/q/receive", 200, {"max_messages": 3})
        if not got["messages"]:
            break
        # A group's oldest messages left, in order; then nothing of it until they go.
        again = await call(http, spec, "POST", "/v2/queues/q/receive", 200, {"max_messages": 10})
        in_flight = {m["group"] for m in got["messages"] if "group" in m}
        assert [m for m in again["messages"] if m.get("group") in in_flight] == []
        seen.append([m["body"] for m in got["messages"]])
        ids = [m["id"] for m in got["messages"] + again["messages"]]
        seen.append([m["body"] for m in again["messages"]])
        await call(http, spec, "POST", "/v2/queues/q/delete", 200, {"ids": ids})
    order = {g: [b for batch in seen for b in batch if b.startswith(g)] for g in "ab"}
    assert order == {"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2"]}
    assert sorted(b for batch in seen for b in batch) == [
        "a0",
        "a1",
        "a2",
        "b0",
        "b1",
        "b2",
        "free",
    ]
    assert max(len(batch) for batch in seen) > 1


async def test_bad_groups_are_refused_naming_the_field(http: Http, spec: dict[str, Any]) -> None:
    await call(http, spec, "PUT", "/v2/queues/q", 201)
    for group in ("", "a b", "g" * 129):
        body = {"messages": [{"body": "x", "group": group}]}
        error = await call(http, spec, "POST", "/v2/queues/q/messages", 422, body)
        assert "group" in error["message"]
    assert await depth(http, spec, "q") == 0
