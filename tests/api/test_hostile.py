"""A hostile or careless client: aborted uploads, deep JSON, vanished long polls, odd names."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from dynamiq.api.front.connection import Connection
from tests.conftest import under_way
from tests.waiting import eventually

Http = TestClient[Any, Any]


async def _raw(http: Http, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    assert http.server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", http.server.port)
    writer.write(data)
    await writer.drain()
    return reader, writer


async def _errors(http: Http, code: str) -> float:
    text = await (await http.get("/metrics")).text()
    for line in text.splitlines():
        if line.startswith("dynamiq_http_errors_total") and f'code="{code}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _live_requests() -> int:
    """Requests alive: aiohttp's, and the front end's connections (which hold theirs)."""
    return sum(isinstance(o, web.BaseRequest | Connection) for o in gc.get_objects())


async def test_an_aborted_upload_is_not_a_server_error_and_its_body_is_freed(
    lmdb_http: Http, caplog: pytest.LogCaptureFixture
) -> None:
    http = lmdb_http
    await http.put("/v2/queues/up")
    head = (
        b"POST /v2/queues/up/messages HTTP/1.1\r\nHost: localhost\r\n"
        b"Content-Type: application/json\r\nContent-Length: 60000\r\n\r\n"
    )
    gc.collect()
    before = _live_requests()
    gc.disable()  # what is freed must be freed by reference counting, not a later GC
    try:
        for _ in range(20):
            _, writer = await _raw(http, head + b'{"messages": [{"body": "' + b"x" * 20000)
            await asyncio.sleep(0.01)
            writer.close()  # mid-body
            await writer.wait_closed()

        async def all_counted() -> bool:
            return await _errors(http, "CLIENT_GONE") >= 20

        await eventually(all_counted, what="20 requests counted as CLIENT_GONE")
        # Only the /metrics request in flight, and the test client's connection.
        assert _live_requests() <= before + 2
    finally:
        gc.enable()
    assert await _errors(http, "CLIENT_GONE") == 20
    assert await _errors(http, "INTERNAL") == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    # and nothing was stored
    peek = await (await http.get("/v2/queues/up/peek")).json()
    assert peek == {"messages": []}


DEEP = b"[" * 1000 + b"]" * 1000
DEEPER = b'{"a":' * 1000 + b"1" + b"}" * 1000


@pytest.mark.parametrize("body", [DEEP, DEEPER])
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/v2/queues/q"),
        ("PATCH", "/v2/queues/q"),
        ("POST", "/v2/queues/q/messages"),
        ("POST", "/v2/queues/q/receive"),
        ("POST", "/v2/queues/q/delete"),
        ("POST", "/v2/queues/q/visibility"),
        ("POST", "/v2/topics/t/messages"),
        ("PATCH", "/v1/queues/q"),
    ],
)
async def test_json_nested_too_deep_is_400(
    lmdb_http: Http, method: str, path: str, body: bytes
) -> None:
    await lmdb_http.put("/v2/queues/q")
    await lmdb_http.put("/v2/topics/t")
    if method == "PUT":
        await lmdb_http.delete("/v2/queues/q")
    headers = {"Content-Type": "application/json"}
    response = await lmdb_http.request(method, path, data=body, headers=headers)
    assert response.status == 400, await response.text()


def _long_poll(queue: str, wait: float) -> bytes:
    """Return a raw receive request waiting ``wait`` seconds for 600 s leases."""
    body = json.dumps({"wait_seconds": wait, "visibility_timeout": 600}).encode()
    return (
        f"POST /v2/queues/{queue}/receive HTTP/1.1\r\nHost: localhost\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def test_a_vanished_long_poll_does_not_lease_the_next_message(lmdb_http: Http) -> None:
    http = lmdb_http
    await http.put("/v2/queues/lp")
    # Given a consumer waiting 5 s that hangs up after 0.3 s
    _, writer = await _raw(http, _long_poll("lp", 5))
    await under_way(http, "the long poll under way")
    writer.close()
    await writer.wait_closed()

    async def noticed() -> bool:  # the node's connection check saw it go
        return await _errors(http, "CLIENT_GONE") >= 1

    await eventually(noticed, what="the vanished consumer counted as CLIENT_GONE")
    # When a message is published
    await http.post("/v2/queues/lp/messages", json={"messages": [{"body": "for the living"}]})
    # Then the next consumer gets it at once: nobody holds it for 600 s
    got = await (await http.post("/v2/queues/lp/receive", json={"wait_seconds": 1})).json()
    assert [m["body"] for m in got["messages"]] == ["for the living"]


async def test_messages_leased_for_a_client_that_left_are_given_back(lmdb_http: Http) -> None:
    http = lmdb_http
    await http.put("/v2/queues/gb")
    # Given a consumer that asks and hangs up before the answer can be written
    _, writer = await _raw(http, _long_poll("gb", 2))
    await under_way(http, "the long poll under way")
    writer.transport.abort()  # gone without a goodbye
    await http.post("/v2/queues/gb/messages", json={"messages": [{"body": "again"}]})
    # Then whatever was leased for it is visible again (not after its lease)

    async def received() -> list[Any]:
        got = await (await http.post("/v2/queues/gb/receive", json={})).json()
        return list(got["messages"])

    messages = await eventually(received, what="the message given back")
    assert [m["body"] for m in messages] == ["again"]


async def test_405_says_which_methods_are_allowed(lmdb_http: Http) -> None:
    for path, version in [("/v2/queues/q/receive", "v2"), ("/v1/queues", "v1")]:
        response = await lmdb_http.request("POST" if version == "v1" else "GET", path)
        assert response.status == 405
        assert response.headers["Allow"]
        assert set(response.headers["Allow"].split(",")) <= {"GET", "HEAD", "POST", "PUT"}
        body = await response.json()
        assert body.get("code", body["error"]) == "METHOD_NOT_ALLOWED"


@pytest.mark.parametrize("name", [".", "..", "%2E", "%2e%2E"])
async def test_dot_names_are_refused(lmdb_http: Http, name: str) -> None:
    # Sent as written: clients normalise such paths away before they leave.
    for path in [f"/v2/queues/{name}", f"/v2/topics/{name}", f"/v1/queues/{name}"]:
        request = f"PUT {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n"
        reader, writer = await _raw(lmdb_http, request.encode())
        status = (await reader.readline()).split()[1]
        writer.close()
        assert status in (b"404", b"422"), (path, status)
    assert (await (await lmdb_http.get("/v2/queues")).json())["queues"] == []
    assert (await (await lmdb_http.get("/v2/topics")).json())["topics"] == []
