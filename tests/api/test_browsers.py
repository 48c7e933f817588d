"""A web page in a developer's browser must not reach the node on their laptop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.conftest import node_client_with

Http = TestClient[Any, Any]


async def _depth(http: Http, queue: str) -> int:
    return int((await (await http.get(f"/v2/queues/{queue}")).json())["stats"]["depth"])


async def test_a_form_posting_text_is_refused_and_publishes_nothing(lmdb_http: Http) -> None:
    http = lmdb_http
    await http.put("/v2/queues/q")
    # What <form enctype="text/plain"> sends: a body that happens to parse as JSON.
    form = b'{"messages": [{"body": "x"}], "pad": "=1"}'
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": content_type} if content_type else {}
        response = await http.post("/v2/queues/q/messages", data=form, headers=headers)
        assert response.status == 415, content_type
        assert (await response.json())["error"] == "UNSUPPORTED_MEDIA_TYPE"
    assert await _depth(http, "q") == 0
    sent = await http.post(
        "/v2/queues/q/messages", json={"messages": [{"body": "x"}]}
    )  # application/json
    assert sent.status == 200 and await _depth(http, "q") == 1


async def test_other_sites_pages_cannot_change_or_lease_anything(lmdb_http: Http) -> None:
    http = lmdb_http
    await http.put("/v2/queues/q")
    await http.post("/v2/queues/q/messages", json={"messages": [{"body": "x"}]})
    cross = {"Sec-Fetch-Site": "cross-site"}
    evil = {"Origin": "http://evil.example"}
    for method, path, headers in (
        ("DELETE", "/v2/queues/q", cross),
        ("POST", "/v2/queues/q/receive", evil),
        ("PUT", "/v2/queues/other", {"Sec-Fetch-Site": "same-site"}),
        ("GET", "/v1/queues/q/messages/10", cross),  # v1 leases with a GET
        ("PUT", "/v1/queues/q/message", evil),
        ("POST", "/", {**cross, "X-Amz-Target": "AmazonSQS.ListQueues"}),
    ):
        response = await http.request(method, path, headers=headers, json={})
        assert response.status == 403, (method, path)
    assert await _depth(http, "q") == 1
    described = await (await http.get("/v2/queues/q")).json()
    assert described["stats"]["in_flight"] == 0
    assert (await http.get("/v2/queues", headers=cross)).status == 200  # reading is not changing
    # The console's own page is same-origin.
    own = {"Sec-Fetch-Site": "same-origin", "Origin": f"http://{http.host}:{http.port}"}
    got = await http.post("/v2/queues/q/receive", json={}, headers=own)
    assert len((await got.json())["messages"]) == 1


async def test_a_name_rebound_to_the_node_is_refused_while_keys_are_off(lmdb_http: Http) -> None:
    http = lmdb_http
    await http.put("/v2/queues/q")
    rebound = await http.delete("/v2/queues/q", headers={"Host": "rebind.attacker.example"})
    assert rebound.status == 403
    assert (await http.get("/v2/queues/q")).status == 200
    for host in (f"localhost:{http.port}", f"127.0.0.1:{http.port}", "[::1]"):
        assert (await http.get("/v2/queues", headers={"Host": host})).status == 200, host


@pytest.fixture
async def named(tmp_path: Path) -> AsyncIterator[Http]:
    flags = {"storage.path": str(tmp_path / "data"), "auth.hosts": "queue.internal, Other.Lan"}
    async with await node_client_with(flags) as http:
        yield http


async def test_names_listed_in_auth_hosts_are_accepted(named: Http) -> None:
    for host, status in (("queue.internal", 200), ("other.lan:80", 200), ("evil.lan", 403)):
        assert (await named.get("/v2/queues", headers={"Host": host})).status == status, host
