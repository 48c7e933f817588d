"""The node's front end: v2's hot routes served without aiohttp, answered as aiohttp
answers them; every other request lent to aiohttp on the same connection, or the
connection handed to it."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from dynamiq.api.front.connection import FRONT, LOANS_IN_A_ROW, Front
from tests.conftest import node_client_with, under_way
from tests.waiting import eventually, soon

Http = TestClient[Any, Any]
JSON_HEAD = "Host: localhost\r\nContent-Type: application/json\r\n"


def _request(method: str, path: str, body: Any = None, head: str = JSON_HEAD) -> bytes:
    data = b"" if body is None else json.dumps(body).encode()
    return f"{method} {path} HTTP/1.1\r\n{head}Content-Length: {len(data)}\r\n\r\n".encode() + data


class _Raw:
    """One client connection, answers read as they come."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def answer(self) -> tuple[int, dict[str, str], bytes]:
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 10)
        lines = head.decode().split("\r\n")
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip()] = value.strip()
        body = await self.reader.readexactly(int(headers["Content-Length"]))
        return int(lines[0].split()[1]), headers, body

    async def closed(self) -> bool:
        """Whether the node closed the connection (closed here too, then)."""
        gone = await asyncio.wait_for(self.reader.read(1), 10) == b""
        await self.close()
        return gone

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def _connect(http: Http, queue: str | None = None) -> _Raw:
    """A raw connection to the node (making ``queue`` first, when given)."""
    assert http.server.port is not None
    if queue is not None:
        assert (await http.put(f"/v2/queues/{queue}")).status == 201
    return _Raw(*await asyncio.open_connection("127.0.0.1", http.server.port))


@pytest.fixture
async def tuned(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Http]:
    """A node on the embedded store with the flags the test gives (``indirect``)."""
    async with await node_client_with(
        {"storage.path": str(tmp_path / "data"), **request.param}
    ) as client:
        yield client


def tuned_with(flags: dict[str, str]) -> pytest.MarkDecorator:
    """Run a test on a node of its own (``tuned``) with ``flags``."""
    return pytest.mark.parametrize("tuned", [flags], indirect=True)


@pytest.fixture
async def both(tmp_path: Path) -> AsyncIterator[dict[str, Http]]:
    """Two nodes: one whose front end serves the hot routes, one where aiohttp does."""
    nodes: dict[str, Http] = {}
    try:
        for front in ("on", "off"):
            flags = {"storage.path": str(tmp_path / front), "core.front": front}
            nodes[front] = await node_client_with(flags)
        yield nodes
    finally:
        for client in nodes.values():
            await client.close()


def _ids_out(body: bytes) -> bytes:
    """The answer without what differs from node to node: ids and times."""
    return re.sub(rb'"\d{6,}"|\d{13}|"\d{4}-\d\d-\d\dT[^"]*"', b"#", body)


# Requests of the three routes, good and bad, each answered the same by the front
# end and by aiohttp.
EXCHANGE = [
    ("POST", "/v2/queues/q/messages", {"messages": [{"body": "one"}, {"body": "two"}]}),
    ("POST", "/v2/queues/q/receive", {"max_messages": 1}),
    ("POST", "/v2/queues/q/receive", None),
    ("POST", "/v2/queues/q/delete", {"ids": ["1", "not-an-id"]}),
    ("POST", "/v2/queues/nowhere/receive", {"max_messages": 1}),
    ("POST", "/v2/queues/q/messages", {"messages": [{"body": "x", "delay_seconds": -1}]}),
    ("POST", "/v2/queues/q/messages", {"messages": []}),
    ("POST", "/v2/queues/q/receive", {"max_messages": 100000}),
    ("POST", "/v2/queues/q/receive", {"wait_seconds": "soon"}),
    ("POST", "/v2/queues/q/delete", {}),
]


async def test_the_front_end_answers_as_aiohttp_does(both: dict[str, Http]) -> None:
    seen: dict[str, list[tuple[int, dict[str, str], bytes]]] = {}
    for front, http in both.items():
        raw = await _connect(http, "q")
        answers = []
        for method, path, body in EXCHANGE:
            await raw.send(_request(method, path, body))
            answers.append(await raw.answer())
        for odd in (b"Content-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}", MALFORMED):
            await raw.send(b"POST /v2/queues/q/delete HTTP/1.1\r\nHost: localhost\r\n" + odd)
            answers.append(await raw.answer())
        await raw.close()
        seen[front] = [(s, _steady(h), _ids_out(b)) for s, h, b in answers]
    statuses = [status for status, _, _ in seen["on"]]
    assert statuses == [200, 200, 200, 422, 404, 422, 422, 422, 422, 422, 415, 400], seen
    assert seen["on"] == seen["off"]


MALFORMED = b"Content-Type: application/json\r\nContent-Length: 3\r\n\r\n{]}"


def _steady(headers: dict[str, str]) -> dict[str, str]:
    """The headers but those that differ from node to node (the body's length with its ids)."""
    return {
        name: value for name, value in headers.items() if name not in ("Date", "Content-Length")
    }


async def test_a_pipelined_request_waits_its_turn(lmdb_http: Http) -> None:
    raw = await _connect(lmdb_http, "p")
    await raw.send(
        _request("POST", "/v2/queues/p/receive", {"wait_seconds": 0.3})
        + _request("POST", "/v2/queues/p/messages", {"messages": [{"body": "late"}]})
    )
    status, _, first = await raw.answer()
    assert (status, json.loads(first)) == (200, {"messages": []})  # waited: nothing came
    status, _, second = await raw.answer()
    assert status == 200 and len(json.loads(second)["ids"]) == 1
    await raw.close()


def _aiohttp(http: Http) -> web.Server:
    server = http.server.runner.server if http.server.runner else None
    assert server is not None
    return server


def _front(http: Http) -> Front:
    app: web.Application | None = http.app
    assert app is not None
    return app[FRONT]


async def test_a_request_of_another_route_is_lent_to_aiohttp_and_the_connection_comes_back(
    lmdb_http: Http,
) -> None:
    await lmdb_http.put("/v2/queues/h")
    aiohttp = _aiohttp(lmdb_http)
    raw = await _connect(lmdb_http)
    publish = _request("POST", "/v2/queues/h/messages", {"messages": [{"body": "a"}]})
    before = aiohttp.requests_count
    await raw.send(publish + _request("GET", "/v2/queues/h") + publish)  # pipelined
    assert (await raw.answer())[0] == 200
    status, _, info = await raw.answer()
    assert status == 200 and json.loads(info)["stats"]["depth"] == 1
    assert (await raw.answer())[0] == 200
    await raw.send(_request("POST", "/v2/queues/h/receive", {"max_messages": 10}))
    status, _, got = await raw.answer()
    assert [m["body"] for m in json.loads(got)["messages"]] == ["a", "a"]
    assert aiohttp.requests_count == before + 1  # the GET alone was aiohttp's
    await raw.send(_request("GET", "/v2/queues/h") + _request("GET", "/v2/queues/nowhere"))
    assert [(await raw.answer())[0] for _ in range(2)] == [200, 404]
    assert aiohttp.requests_count == before + 3
    await raw.close()


async def test_a_lent_request_s_body_may_come_in_pieces_and_the_next_waits_for_its_answer(
    lmdb_http: Http,
) -> None:
    create = _request("PUT", "/v2/queues/pieces", {"visibility_timeout": 7})
    cut = create.index(b"\r\n\r\n") + 6
    raw = await _connect(lmdb_http)
    await raw.send(create[:cut])
    await soon(lambda: _front(lmdb_http).lent == 1, what="the request lent, its body unfinished")
    publish = _request("POST", "/v2/queues/pieces/messages", {"messages": [{"body": "b"}]})
    await raw.send(create[cut:] + publish)  # the publish needs the queue made first
    status, _, made = await raw.answer()
    assert status == 201 and json.loads(made)["settings"]["visibility_timeout"] == 7
    assert (await raw.answer())[0] == 200
    await raw.close()


@tuned_with({"limits.idletimeout": "0.3"})
async def test_aiohttp_s_idle_timer_does_not_close_a_connection_the_front_end_serves(
    tuned: Http,
) -> None:
    http = tuned
    raw = await _connect(http, "t")
    await raw.send(_request("GET", "/v2/queues/t"))
    assert (await raw.answer())[0] == 200
    # aiohttp's protocol idles out during the long poll; the connection goes on.
    await raw.send(_request("POST", "/v2/queues/t/receive", {"wait_seconds": 0.8}))
    status, _, got = await raw.answer()
    assert (status, json.loads(got)) == (200, {"messages": []})
    await raw.send(_request("GET", "/v2/queues/t"))  # lent to a new protocol
    assert (await raw.answer())[0] == 200
    front = _front(http)
    assert front.lent == 1
    await raw.close()

    async def freed() -> bool:
        return front.lent == 0 and not front.connections

    await eventually(freed, what="the closed connection's protocols freed")


async def test_a_lent_answer_that_closes_closes_the_connection(lmdb_http: Http) -> None:
    raw = await _connect(lmdb_http, "c")
    await raw.send(_request("GET", "/v2/queues/c", head=JSON_HEAD + "Connection: close\r\n"))
    status, headers, _ = await raw.answer()
    assert (status, headers.get("Connection")) == (200, "close")
    assert await raw.closed()


@tuned_with({"limits.bodytimeout": "0.3"})
async def test_nothing_after_a_lent_answer_that_closes_is_served(tuned: Http) -> None:
    http = tuned
    raw = await _connect(http, "k")
    closing = JSON_HEAD + "Connection: close\r\n"
    create = _request("PUT", "/v2/queues/late", {"visibility_timeout": 7}, closing)
    await raw.send(create[:-4])
    status, headers, _ = await raw.answer()  # answered before its body is all here
    assert (status, headers.get("Connection")) == (408, "close")
    publish = _request("POST", "/v2/queues/k/messages", {"messages": [{"body": "x"}]})
    await raw.send(create[-4:] + publish)
    assert await raw.closed()
    assert (await http.get("/v2/queues/late")).status == 404
    info = await (await http.get("/v2/queues/k")).json()
    assert info["stats"]["depth"] == 0


async def test_a_client_gone_mid_loan_frees_aiohttp_s_protocol(lmdb_http: Http) -> None:
    http = lmdb_http
    aiohttp, front = _aiohttp(http), _front(http)
    connections = len(aiohttp.connections)
    raw = await _connect(http)
    create = _request("PUT", "/v2/queues/gone", {"visibility_timeout": 7})
    await raw.send(create[:-4])  # the body never ends
    await soon(lambda: front.lent == 1, what="the request lent, its body unfinished")
    assert (front.lent, len(aiohttp.connections)) == (1, connections + 1)
    await raw.close()

    async def freed() -> bool:
        return front.lent == 0 and len(aiohttp.connections) == connections

    await eventually(freed, what="aiohttp's protocol freed")
    assert (await http.get("/v2/queues/gone")).status == 404


async def test_a_connection_of_loans_alone_goes_to_aiohttp_for_good(lmdb_http: Http) -> None:
    await lmdb_http.put("/v2/queues/l")
    front = _front(lmdb_http)
    before = len(front.connections)
    raw = await _connect(lmdb_http)
    stats = _request("GET", "/v2/queues/l")

    async def loans(count: int) -> None:
        for _ in range(count):
            await raw.send(stats)
            assert (await raw.answer())[0] == 200

    # A request served here between loans keeps the connection here.
    await loans(LOANS_IN_A_ROW)
    await raw.send(_request("POST", "/v2/queues/l/receive", None))
    assert (await raw.answer())[0] == 200
    await loans(LOANS_IN_A_ROW)
    assert len(front.connections) == before + 1
    await loans(1)  # one in a row too many: aiohttp's from now on
    assert len(front.connections) == before
    await raw.send(_request("POST", "/v2/queues/l/receive", None))
    assert (await raw.answer())[0] == 200
    await raw.close()


async def test_a_console_file_takes_its_connection_to_aiohttp(lmdb_http: Http) -> None:
    raw = await _connect(lmdb_http)
    await raw.send(b"GET /console/console.css HTTP/1.1\r\nHost: localhost\r\n\r\n")
    status, headers, css = await raw.answer()
    assert status == 200 and headers["Content-Type"].startswith("text/css") and css
    await raw.send(_request("GET", "/v2/queues/nowhere"))
    assert (await raw.answer())[0] == 404
    await raw.close()


@tuned_with({"limits.bodytimeout": "0.5"})
async def test_a_body_may_come_after_its_head_within_the_body_timeout(tuned: Http) -> None:
    http = tuned
    await http.put("/v2/queues/b")
    whole = _request("POST", "/v2/queues/b/messages", {"messages": [{"body": "slow"}]})
    cut = whole.index(b"\r\n\r\n") + 4
    raw = await _connect(http)
    await raw.send(whole[:cut])
    await asyncio.sleep(0.2)
    await raw.send(whole[cut:-3])
    await asyncio.sleep(0.1)
    await raw.send(whole[-3:])
    assert (await raw.answer())[0] == 200
    await raw.send(whole[: cut + 5])  # the rest never comes
    status, _, body = await raw.answer()
    assert status == 408 and json.loads(body)["error"] == "REQUEST_TIMEOUT"
    assert await raw.closed()
    assert (await (await http.get("/v2/queues/b")).json())["stats"]["depth"] == 1


@tuned_with({"limits.idletimeout": "0.3"})
async def test_a_connection_without_a_whole_head_is_closed_after_the_idle_timeout(
    tuned: Http,
) -> None:
    http = tuned
    raw = await _connect(http, "i")
    await raw.send(_request("POST", "/v2/queues/i/receive", None))
    assert (await raw.answer())[0] == 200
    await raw.send(b"POST /v2/queues/i/receive HTTP/1.1\r\nHost: loc")
    started = asyncio.get_running_loop().time()
    assert await raw.closed()
    assert asyncio.get_running_loop().time() - started < 5


# The test client's own connection is one of the three.
@tuned_with({"limits.maxconnections": "3"})
async def test_front_end_connections_count_toward_the_connection_limit(tuned: Http) -> None:
    http = tuned
    await http.put("/v2/queues/c")
    held = [await _connect(http) for _ in range(2)]
    for raw in held:
        await raw.send(_request("POST", "/v2/queues/c/receive", None))
        assert (await raw.answer())[0] == 200  # both the front end's
    refused = await _connect(http)
    status, headers, _ = await refused.answer()
    assert status == 503 and headers["Retry-After"] == "1"
    for raw in [*held, refused]:
        await raw.close()


async def test_a_long_poll_answers_at_shutdown_and_its_connection_closes(lmdb_http: Http) -> None:
    http = lmdb_http
    raw = await _connect(http, "s")
    await raw.send(_request("POST", "/v2/queues/s/receive", {"wait_seconds": 5}))
    await under_way(http, "the long poll under way")
    closing = asyncio.ensure_future(http.close())
    status, headers, body = await raw.answer()
    assert (status, json.loads(body), headers.get("Connection")) == (
        200,
        {"messages": []},
        "close",
    )
    assert await raw.closed()
    await closing
