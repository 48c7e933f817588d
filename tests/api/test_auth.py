"""Application keys: who may call what, applications kept apart, wrong keys held back."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dynamiq.access.keys import ROLES
from dynamiq.access.roles import GRANTS
from dynamiq.api import v1
from dynamiq.api.routes import Route
from dynamiq.api.v2 import routes as v2
from tests.conftest import ADMIN_KEY, node_client_with

Http = TestClient[Any, Any]
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _key(http: Http, application: str, role: str, **extra: Any) -> str:
    response = await http.post(
        "/v2/keys", json={"application": application, "role": role, **extra}, headers=ADMIN
    )
    assert response.status == 201, await response.text()
    made = await response.json()
    assert made["key"] == f"{made['key_id']}.{made['secret']}"
    assert (made["application"], made["role"]) == (application, role)
    return str(made["key"])


async def test_a_request_without_a_key_or_with_a_wrong_one_is_401(keyed: Http) -> None:
    for headers in ({}, _bearer("dq0000000000000000.nope"), {"Authorization": "Basic eDp5"}):
        response = await keyed.get("/v2/queues", headers=headers)
        assert response.status == 401
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="dynamiq"'
        assert (await response.json())["error"] == "UNAUTHORIZED"
    assert (await keyed.get("/v2/queues", headers=ADMIN)).status == 200
    # Documents and the console's page need no key.
    assert (await keyed.get("/v2/openapi.json")).status == 200
    assert (await keyed.get("/")).status == 200


async def test_the_document_asks_for_keys_on_a_node_that_needs_them(keyed: Http) -> None:
    on = await (await keyed.get("/v2/openapi.json")).json()
    assert on["paths"]["/v2/queues"]["get"]["security"] == [{"key": []}]
    assert {"401", "403"} <= set(on["paths"]["/v2/queues"]["get"]["responses"])
    assert "/v2/keys" in on["paths"] and "securitySchemes" in on["components"]


async def test_without_keys_nothing_asks_for_one_and_no_key_route_is_served(http: Http) -> None:
    off = await (await http.get("/v2/openapi.json")).json()
    assert "security" not in off["paths"]["/v2/queues"]["get"]
    assert not {"401", "403"} & set(off["paths"]["/v2/queues"]["get"]["responses"])
    assert "/v2/keys" not in off["paths"] and "securitySchemes" not in off["components"]
    made = await http.post("/v2/keys", json={"application": "a", "role": "admin"})
    assert made.status == 404 and (await made.json())["error"] == "NOT_FOUND"


async def test_a_keys_secret_is_shown_once_and_revoking_it_locks_it_out(keyed: Http) -> None:
    key = await _key(keyed, "billing", "produce", description="the invoicer")
    key_id, secret = key.split(".")
    assert (await keyed.put("/v2/queues/q", headers=ADMIN)).status == 201
    published = await keyed.post(
        "/v2/queues/q/messages", json={"messages": [{"body": "x"}]}, headers=_bearer(key)
    )
    assert published.status == 404  # its application has no queue q: billing:q is not q
    listed = await keyed.get("/v2/keys", headers=ADMIN)
    text = await listed.text()
    assert secret not in text
    (info,) = (await listed.json())["keys"]
    assert (info["key_id"], info["application"], info["role"]) == (key_id, "billing", "produce")
    assert info["description"] == "the invoicer" and info["last_used"] is not None
    assert (await keyed.delete(f"/v2/keys/{key_id}", headers=ADMIN)).status == 200
    assert (await keyed.get("/v2/queues", headers=_bearer(key))).status == 401
    assert (await keyed.delete(f"/v2/keys/{key_id}", headers=ADMIN)).status == 404
    assert (await (await keyed.get("/v2/keys", headers=ADMIN)).json())["keys"] == []


async def test_bad_key_requests_are_refused(keyed: Http) -> None:
    for body in (
        {"application": "Billing", "role": "produce"},
        {"application": "billing", "role": "owner"},
        {"application": "billing"},
        {"application": "billing", "role": "produce", "requests_per_second": 0},
    ):
        response = await keyed.post("/v2/keys", json=body, headers=ADMIN)
        assert response.status == 422, body
    assert (await (await keyed.get("/v2/keys", headers=ADMIN)).json())["keys"] == []


def _request(route: Route, prefix: str = "") -> tuple[str, str]:
    values = {"queue": "q", "topic": "t", "id": "1", "key_id": "dq0000000000000000"}
    values |= {"batch": "1", "ids": "1"}
    path = re.sub(r"\{(\w+)(?::[^}]*)?\}", lambda m: values[m.group(1)], route.path)
    return route.method, prefix + path


ROUTES = [(r, "") for r in v2.ROUTES] + [(r, "/v1") for r in v1.ROUTES]


@pytest.mark.parametrize("role", ROLES)
async def test_each_role_is_allowed_exactly_its_route_classes(keyed: Http, role: str) -> None:
    key = _bearer(await _key(keyed, "app", role))
    for route, prefix in ROUTES:
        method, path = _request(route, prefix)
        response = await keyed.request(method, path, headers=key, data=b"{}")
        body = await response.text()
        if route.access in GRANTS[role]:
            assert response.status not in (401, 403), (role, method, path, body)
        else:
            assert response.status == 403, (role, method, path, body)
            assert "FORBIDDEN" in body


async def test_an_application_sees_and_touches_only_its_own_queues(keyed: Http) -> None:
    a_manage = _bearer(await _key(keyed, "a", "manage"))
    a_consume = _bearer(await _key(keyed, "a", "consume"))
    b_all = _bearer(await _key(keyed, "b", "manage"))
    assert (await keyed.put("/v2/queues/orders", headers=a_manage)).status == 201
    assert (await keyed.put("/v2/queues/orders", headers=b_all)).status == 201  # its own
    sent = await keyed.post(
        "/v2/queues/orders/messages", json={"messages": [{"body": "for a"}]}, headers=a_manage
    )
    (message_id,) = (await sent.json())["ids"]
    # Each lists its own, by the plain name; the administrator sees both in full.
    for headers, names in ((a_consume, ["orders"]), (b_all, ["orders"])):
        assert (await (await keyed.get("/v2/queues", headers=headers)).json())["queues"] == names
    listed = await (await keyed.get("/v2/queues", headers=ADMIN)).json()
    assert listed["queues"] == ["a:orders", "b:orders"]
    described = await (await keyed.get("/v2/queues/orders", headers=a_consume)).json()
    assert described["name"] == "orders"
    # b cannot reach a's queue by its full name, nor a's message by its id.
    for method, path in (
        ("GET", "/v2/queues/a:orders"),
        ("POST", "/v2/queues/a:orders/receive"),
        ("GET", f"/v2/queues/a:orders/messages/{message_id}"),
        ("GET", "/v1/queues/a:orders"),
    ):
        response = await keyed.request(method, path, headers=b_all)
        assert response.status == 403, (method, path)
    assert (
        await keyed.get(f"/v2/queues/orders/messages/{message_id}", headers=b_all)
    ).status == 404
    gone = await keyed.post("/v2/queues/orders/delete", json={"ids": [message_id]}, headers=b_all)
    assert (await gone.json())["deleted"] == []
    # a's consumer gets it, by the plain name.
    got = await keyed.post("/v2/queues/orders/receive", json={}, headers=a_consume)
    assert [m["body"] for m in (await got.json())["messages"]] == ["for a"]


async def test_settings_and_subscriptions_name_queues_within_the_application(keyed: Http) -> None:
    a = _bearer(await _key(keyed, "a", "manage"))
    b = _bearer(await _key(keyed, "b", "manage"))
    await keyed.put("/v2/queues/dead", headers=a)
    made = await keyed.put(
        "/v2/queues/work",
        json={"dead_letter_queue": "dead", "max_receives": 1, "visibility_timeout": 1},
        headers=a,
    )
    assert (await made.json())["settings"]["dead_letter_queue"] == "dead"
    described = await (await keyed.get("/v2/queues/a:work", headers=ADMIN)).json()
    assert described["settings"]["dead_letter_queue"] == "a:dead"
    assert (
        await keyed.put("/v2/queues/x", json={"dead_letter_queue": "a:dead"}, headers=b)
    ).status == 403
    # A topic of a's fans out to a's queue; b subscribing to it names a's topic: 403.
    assert (await keyed.put("/v2/topics/events", headers=a)).status == 201
    subscribed = await keyed.put("/v2/topics/events/subscriptions/work", headers=a)
    assert (await subscribed.json())["queues"] == ["work"]
    published = await keyed.post(
        "/v2/topics/events/messages", json={"messages": [{"body": "e"}]}, headers=a
    )
    assert list((await published.json())["ids"]) == ["work"]
    assert (await keyed.put("/v2/topics/a:events/subscriptions/x", headers=b)).status == 403
    assert (await (await keyed.get("/v2/topics", headers=b)).json())["topics"] == []
    # The dead letter names its source queue by the name a knows it by.
    await keyed.post("/v2/queues/work/receive", json={}, headers=a)
    dead: list[dict[str, Any]] = []
    for _ in range(50):
        got = await keyed.post("/v2/queues/work/receive", json={"wait_seconds": 0.2}, headers=a)
        assert (await got.json())["messages"] == []
        peeked = await keyed.get("/v2/queues/dead/peek", headers=a)
        dead = (await peeked.json())["messages"]
        if dead:
            break
    assert dead and dead[0]["dead_letter"]["source_queue"] == "work"


@pytest.fixture
async def node_with(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Http]:
    """A node on the embedded store that needs keys, with the flags the test names."""
    flags = {"storage.path": str(tmp_path / "data"), "auth.enabled": "true"}
    async with await node_client_with(
        {**flags, "auth.adminkey": ADMIN_KEY, **request.param}
    ) as http:
        yield http


@pytest.mark.parametrize(
    "node_with", [{"auth.failedburst": "3", "auth.failedpersecond": "0.1"}], indirect=True
)
async def test_wrong_keys_from_one_address_are_held_back_but_checked_keys_pass(
    node_with: Http,
) -> None:
    http = node_with
    good = _bearer(await _key(http, "a", "consume"))
    assert (await http.get("/v2/queues", headers=good)).status == 200
    statuses = [
        (await http.get("/v2/queues", headers=_bearer(f"dq000000000000000{i}.x"))).status
        for i in range(5)
    ]
    assert statuses == [401, 401, 401, 429, 429]
    held = await http.get("/v2/queues", headers=_bearer("dq0000000000000009.x"))
    assert held.status == 429 and int(held.headers["Retry-After"]) >= 1
    assert (await held.json())["error"] == "TOO_MANY_REQUESTS"
    assert (await http.get("/v2/queues", headers=good)).status == 200
    assert (await http.get("/v2/queues", headers=ADMIN)).status == 200


async def test_a_key_with_a_rate_gets_429_past_it(keyed: Http) -> None:
    key = _bearer(await _key(keyed, "a", "consume", requests_per_second=2))
    statuses = [(await keyed.get("/v2/queues", headers=key)).status for _ in range(6)]
    assert statuses[:2] == [200, 200] and 429 in statuses
    assert (await keyed.get("/v2/queues", headers=ADMIN)).status == 200


SQS_LIST = {"X-Amz-Target": "AmazonSQS.ListQueues", "Content-Type": "application/x-amz-json-1.0"}


async def test_v1_sqs_and_metrics_need_keys_unless_served_open(keyed: Http) -> None:
    closed = keyed
    assert (await closed.get("/v1/queues")).status == 401
    assert (await closed.get("/v1/queues", headers=ADMIN)).status == 200
    assert (await closed.get("/metrics")).status == 401
    monitor = _bearer(await _key(closed, "ops", "monitor"))
    assert (await closed.get("/metrics", headers=monitor)).status == 200
    sqs = await closed.post("/", data=b"{}", headers=SQS_LIST)  # unsigned: SigV4 is asked
    assert sqs.status == 403
    assert (await sqs.json(content_type=None))["__type"].endswith("#MissingAuthenticationToken")
    assert sqs.headers["x-amzn-query-error"] == "MissingAuthenticationToken;Sender"


@pytest.mark.parametrize(
    "node_with", [{"auth.v1": "open", "auth.sqs": "open", "auth.metrics": "open"}], indirect=True
)
async def test_v1_sqs_and_metrics_served_open_need_no_key(node_with: Http) -> None:
    opened = node_with
    assert (await opened.put("/v1/queues/q")).status == 201
    assert (await opened.get("/metrics")).status == 200
    sqs = await opened.post("/", data=b"{}", headers=SQS_LIST)
    assert sqs.status == 200
    assert (await opened.get("/v2/queues")).status == 401  # v2 still needs one


async def test_secrets_appear_in_no_log_answer_or_metric(
    keyed: Http, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    key = await _key(keyed, "a", "manage")
    secret = key.split(".")[1]
    headers = _bearer(key)
    await keyed.put("/v2/queues/q", headers=headers)
    await keyed.get("/v2/queues", headers=_bearer(key[:-1] + "x"))  # a wrong one
    answers = [
        await (await keyed.get(path, headers=ADMIN)).text()
        for path in ("/v2/status", "/metrics", "/v2/stats", "/v2/keys", "/v2/queues/a:q")
    ]
    answers.append(await (await keyed.get("/")).text())
    for text in [*answers, caplog.text]:
        assert secret not in text and ADMIN_KEY not in text
