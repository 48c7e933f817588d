"""Attributes, routing keys and subscription filters over v2, on every store; every
answer checked against the OpenAPI document."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.documented import Http, call, depth, publish, receive
from tests.waiting import eventually

ATTRIBUTES = {"tenant": "acme", "priority": 3, "ratio": 0.25, "sig": {"base64": "AAEC/w=="}}


async def test_attributes_and_the_routing_key_come_back_on_receive_and_peek(
    http: Http, spec: dict[str, Any]
) -> None:
    await call(http, spec, "PUT", "/v2/queues/q", 201)
    message = {"body": "hi", "attributes": ATTRIBUTES, "routing_key": "orders.eu"}
    (mid,) = (
        await call(http, spec, "POST", "/v2/queues/q/messages", 200, {"messages": [message]})
    )["ids"]
    peeked = (await call(http, spec, "GET", f"/v2/queues/q/messages/{mid}", 200))["message"]
    (got,) = await receive(http, spec, "q")
    for seen in (peeked, got):
        assert seen["attributes"] == ATTRIBUTES and seen["routing_key"] == "orders.eu"
    await call(http, spec, "POST", "/v2/queues/q/messages", 200, {"messages": [{"body": "bare"}]})
    (bare,) = await receive(http, spec, "q")
    assert "attributes" not in bare and "routing_key" not in bare


async def test_attributes_are_copied_by_fan_out_and_kept_by_dead_letters_and_redrive(
    http: Http, spec: dict[str, Any]
) -> None:
    await call(http, spec, "PUT", "/v2/queues/dlq", 201)
    dead = {"visibility_timeout": 0.2, "max_receives": 1, "dead_letter_queue": "dlq"}
    await call(http, spec, "PUT", "/v2/queues/q", 201, dead)
    await call(http, spec, "PUT", "/v2/queues/r", 201)
    await call(http, spec, "PUT", "/v2/topics/t", 201)
    for queue in ("q", "r"):
        await call(http, spec, "PUT", f"/v2/topics/t/subscriptions/{queue}", 200)
    message = {"body": "x", "attributes": ATTRIBUTES, "routing_key": "k"}
    await call(http, spec, "POST", "/v2/topics/t/messages", 200, {"messages": [message]})
    (copy,) = await receive(http, spec, "r")
    assert copy["attributes"] == ATTRIBUTES
    assert len(await receive(http, spec, "q")) == 1  # its one lease lapses: dead-lettered

    async def dead_lettered() -> bool:
        return await depth(http, spec, "dlq") == 1

    await eventually(dead_lettered, what="the dead letter")
    (letter,) = (await call(http, spec, "GET", "/v2/queues/dlq/peek?max=5", 200))["messages"]
    assert letter["attributes"] == ATTRIBUTES and letter["routing_key"] == "k"
    await call(http, spec, "POST", "/v2/queues/dlq/redrive", 202)
    back = await eventually(lambda: receive(http, spec, "q"), what="the message redriven")
    assert [(m["attributes"], m["routing_key"]) for m in back] == [(ATTRIBUTES, "k")]


@pytest.mark.parametrize(
    ("attributes", "named"),
    [
        ({f"a{i}": "v" for i in range(17)}, "attributes"),
        ({"bad name": "v"}, "attributes"),
        ({"x" * 129: "v"}, "attributes"),
        ({"flag": True}, "attributes"),
        ({"list": [1]}, "attributes"),
        ({"blob": {"base64": "not base64!"}}, "attributes.blob"),
        ({"blob": {"hex": "00"}}, "attributes"),
    ],
)
async def test_bad_attributes_are_refused_naming_them_and_store_nothing(
    http: Http, spec: dict[str, Any], attributes: dict[str, Any], named: str
) -> None:
    await call(http, spec, "PUT", "/v2/queues/q", 201)
    body = {"messages": [{"body": "fine"}, {"body": "x", "attributes": attributes}]}
    error = await call(http, spec, "POST", "/v2/queues/q/messages", 422, body)
    assert named in error["message"]
    long_key = {"body": "x", "routing_key": "k" * 256}
    await publish(http, spec, "/v2/queues/q/messages", long_key, status=422)
    assert await depth(http, spec, "q") == 0


async def test_subscriptions_take_what_their_pattern_and_filter_let_through(
    http: Http, spec: dict[str, Any]
) -> None:
    for queue in ("all", "eu", "big"):
        await call(http, spec, "PUT", f"/v2/queues/{queue}", 201)
    await call(http, spec, "PUT", "/v2/topics/orders", 201)
    await call(http, spec, "PUT", "/v2/topics/orders/subscriptions/all", 200)
    await call(
        http, spec, "PUT", "/v2/topics/orders/subscriptions/eu", 200, {"pattern": "orders.eu.*"}
    )
    big = {"pattern": "orders.#", "filter": {"total": [{"numeric": [">=", 100]}]}}
    described = await call(http, spec, "PUT", "/v2/topics/orders/subscriptions/big", 200, big)
    assert described["subscriptions"] == [
        {"queue": "all"},
        {"queue": "big", **big},
        {"queue": "eu", "pattern": "orders.eu.*"},
    ]
    batch = [
        {"body": "small eu", "routing_key": "orders.eu.created", "attributes": {"total": 5}},
        {"body": "big us", "routing_key": "orders.us.created", "attributes": {"total": 500}},
        {"body": "no key"},
    ]
    ids = (await call(http, spec, "POST", "/v2/topics/orders/messages", 200, {"messages": batch}))[
        "ids"
    ]
    assert sorted(ids) == ["all", "big", "eu"]
    assert [i is None for i in ids["eu"]] == [False, True, True]
    assert [i is None for i in ids["big"]] == [True, False, True]
    assert None not in ids["all"]
    for queue, bodies in {"all": ["small eu", "big us", "no key"], "eu": ["small eu"]}.items():
        got = await receive(http, spec, queue)
        assert sorted(m["body"] for m in got) == sorted(bodies)
        assert {m["id"] for m in got} == {i for i in ids[queue] if i is not None}
    assert [m["body"] for m in await receive(http, spec, "big")] == ["big us"]


async def test_a_body_filter_routes_json_bodies(http: Http, spec: dict[str, Any]) -> None:
    await call(http, spec, "PUT", "/v2/queues/paid", 201)
    await call(http, spec, "PUT", "/v2/topics/orders", 201)
    paid = {"filter": {"order": {"state": ["paid"]}}, "filter_scope": "body"}
    described = await call(http, spec, "PUT", "/v2/topics/orders/subscriptions/paid", 200, paid)
    assert described["subscriptions"] == [{"queue": "paid", **paid}]
    batch: list[dict[str, Any]] = [
        {"body": '{"order": {"state": "paid", "total": 3}}'},
        {"body": '{"order": {"state": "open"}}'},
        {"body": "not json", "attributes": {"order": "paid"}},
    ]
    ids = (await call(http, spec, "POST", "/v2/topics/orders/messages", 200, {"messages": batch}))[
        "ids"
    ]
    assert [i is None for i in ids["paid"]] == [False, True, True]
    assert [m["body"] for m in await receive(http, spec, "paid")] == [batch[0]["body"]]
    metrics = await (await http.get("/metrics")).text()
    for counted in (
        'dynamiq_topic_messages_published_total{topic="orders"} 3.0',
        'dynamiq_topic_notifications_delivered_total{topic="orders"} 1.0',
        'dynamiq_topic_notifications_filtered_out_body_total{topic="orders"} 1.0',
        'dynamiq_topic_notifications_filtered_out_invalid_body_total{topic="orders"} 1.0',
    ):
        assert counted in metrics


async def test_a_message_no_subscription_takes_is_stored_nowhere_and_counted(
    http: Http, spec: dict[str, Any]
) -> None:
    await call(http, spec, "PUT", "/v2/queues/eu", 201)
    await call(http, spec, "PUT", "/v2/topics/t", 201)
    await call(http, spec, "PUT", "/v2/topics/t/subscriptions/eu", 200, {"pattern": "eu.#"})
    body = {"messages": [{"body": "x", "routing_key": "us.created"}]}
    assert await call(http, spec, "POST", "/v2/topics/t/messages", 200, body) == {"ids": {}}
    assert await depth(http, spec, "eu") == 0
    metrics = await (await http.get("/metrics")).text()
    assert 'dynamiq_topic_messages_unrouted_total{topic="t"} 1.0' in metrics


async def test_a_subscription_is_changed_by_a_new_put_and_kept_by_a_v1_subscribe(
    http: Http, spec: dict[str, Any]
) -> None:
    await call(http, spec, "PUT", "/v2/queues/q", 201)
    await call(http, spec, "PUT", "/v2/topics/t", 201)
    path = "/v2/topics/t/subscriptions/q"
    await call(http, spec, "PUT", path, 200, {"pattern": "a.*"})
    assert (await http.put("/v1/topics/t/queues/q")).status == 200
    assert (await call(http, spec, "GET", "/v2/topics/t", 200))["subscriptions"] == [
        {"queue": "q", "pattern": "a.*"}
    ]
    changed = await call(http, spec, "PUT", path, 200, {"filter": {"kind": ["x"]}})
    assert changed["subscriptions"] == [{"queue": "q", "filter": {"kind": ["x"]}}]
    assert (await call(http, spec, "PUT", path, 200))["subscriptions"] == [{"queue": "q"}]


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"pattern": "a.b*"}, "pattern"),
        ({"pattern": "a" * 256}, "pattern"),
        ({"filter": {}}, "filter"),
        ({"filter": {"total": {"numeric": ["<", 5, ">", 1]}}}, "filter: Too many elements"),
        ({"filter": {"kind": {"suffix": 1}}}, "filter: suffix match pattern must be a string"),
        ({"filter": {"a": {"b": ["c"]}}}, "filter_scope: Filter policy scope"),
        ({"filter": ["kind"]}, "filter"),
        ({"patern": "a"}, "patern"),
    ],
)
async def test_bad_subscriptions_are_refused_naming_the_field_and_change_nothing(
    http: Http, spec: dict[str, Any], body: dict[str, Any], named: str
) -> None:
    await call(http, spec, "PUT", "/v2/queues/q", 201)
    await call(http, spec, "PUT", "/v2/topics/t", 201)
    await call(http, spec, "PUT", "/v2/topics/t/subscriptions/q", 200, {"pattern": "keep.#"})
    error = await call(http, spec, "PUT", "/v2/topics/t/subscriptions/q", 422, body)
    assert named in error["message"]
    assert (await call(http, spec, "GET", "/v2/topics/t", 200))["subscriptions"] == [
        {"queue": "q", "pattern": "keep.#"}
    ]
    await call(http, spec, "PUT", "/v2/topics/t/subscriptions/nope", 404, body)
    await call(http, spec, "PUT", "/v2/topics/nope/subscriptions/q", 404, body)
