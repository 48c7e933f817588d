"""The deliveries' HTTP client against real servers on loopback: answers of every
framing HTTP/1.1 allows (and malformed ones), kept connections and when they are not
kept, a kept connection the endpoint closed, timeouts, the rules at connection time,
the bytes of the request, and HTTPS with an authority of the operator's own."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiohttp.test_utils import TestClient

from dynamiq.push.client import MAX_ANSWER_BYTES, HttpPoster
from dynamiq.push.endpoints import EndpointRules, Unreachable
from dynamiq.push.request import Request
from dynamiq.testing.endpoint import Receiver
from tests.api.test_webhooks import confirmed_webhook
from tests.conftest import node_client_with
from tests.waiting import soon, turns

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class Scripted:
    """A server that reads each request whole and answers what ``answer(n)`` gives for
    the ``n``-th request (then closes the connection when it says so)."""

    def __init__(self, answer: Callable[[int], tuple[bytes, bool]]) -> None:
        self.answer = answer
        self.connections = 0
        self.closed = 0  # connections this server closed
        self.requests: list[bytes] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Scripted:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.requests.append(head + await reader.readexactly(length))
                answer, close = self.answer(len(self.requests))
                writer.write(answer)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self.closed += 1


def _request(url: str, body: bytes = b"hello") -> Request:
    return Request(url, {"Content-Type": "text/plain; charset=UTF-8"}, body)


@pytest.fixture
async def poster() -> AsyncIterator[HttpPoster]:
    made = HttpPoster(EndpointRules(), timeout=5.0, connect_timeout=2.0)
    yield made
    await made.close()


LONG = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * (2 * MAX_ANSWER_BYTES)


@pytest.mark.parametrize(
    ("answer", "status", "kept"),
    [
        (OK, 200, True),
        (
            b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
            201,
            True,
        ),
        (
            b"HTTP/1.1 202 A\r\nTransfer-Encoding: chunked\r\n\r\n1;x=y\r\na\r\n0\r\nT: 1\r\n\r\n",
            202,
            True,
        ),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", 204, True),
        (b"HTTP/1.1 503 Busy\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n", 503, True),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 200, False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, False),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", 200, True),
        (LONG, 200, False),  # read up to the bound, then the connection is closed
        # More than it said: what follows is no answer to anything, so not kept.
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n", 200, False),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok\x00\x01", 200, False),
    ],
)
async def test_every_framing_gives_its_status_and_keeps_what_may_be_kept(
    poster: HttpPoster, answer: bytes, status: int, kept: bool
) -> None:
    async with Scripted(lambda _: (answer, False)) as server:
        assert await poster.post(_request(server.url())) == status
        assert await poster.post(_request(server.url())) == status
        assert len(server.requests) == 2
        assert server.connections == (1 if kept else 2)


async def test_a_body_that_ends_with_the_connection(poster: HttpPoster) -> None:
    async with Scripted(lambda _: (b"HTTP/1.1 500 Oops\r\n\r\nsomething broke", True)) as server:
        assert await poster.post(_request(server.url())) == 500
        assert await poster.post(_request(server.url())) == 500
        assert server.connections == 2


@pytest.mark.parametrize(
    "answer",
    [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 abc Nope\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nX: " + b"y" * 20000 + b"\r\n\r\n",
        # Framings that would let an answer hide another: refused, as llhttp refuses them.
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n folded\r\n\r\nok",
        b"HTTP/1.1 200 OK\nContent-Length: 2\r\n\r\nok",
    ],
)
async def test_a_malformed_answer_is_no_answer(poster: HttpPoster, answer: bytes) -> None:
    async with Scripted(lambda _: (answer, False)) as server:
        with pytest.raises(Unreachable):
            await poster.post(_request(server.url()))
        assert await _fresh_connection_works(poster, server)


async def _fresh_connection_works(poster: HttpPoster, server: Scripted) -> bool:
    """The next request is answered on a new connection (the broken one was dropped)."""
    before = server.connections
    server.answer = lambda _: (OK, False)
    return await poster.post(_request(server.url())) == 200 and server.connections == before + 1


async def test_a_kept_connection_the_endpoint_closed_is_replaced(poster: HttpPoster) -> None:
    # The endpoint answers, keeps the connection open as it said, then drops it idle.
    async with Scripted(lambda _: (OK, True)) as server:
        assert await poster.post(_request(server.url())) == 200
        await soon(lambda: server.closed == 1, what="the endpoint closed the connection")
        await turns()  # the client's side of it sees the end
        assert await poster.post(_request(server.url())) == 200
        assert await poster.post(_request(server.url())) == 200
        assert server.connections == 3 and len(server.requests) == 3  # each sent once


async def test_no_answer_in_time_is_unreachable() -> None:
    poster = HttpPoster(EndpointRules(), timeout=0.3, connect_timeout=0.3)
    hold = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await hold.wait()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(Unreachable):
            await poster.post(_request(f"http://127.0.0.1:{port}/"))
    finally:
        hold.set()
        server.close()
        await poster.close()


async def test_a_refused_port_is_unreachable(poster: HttpPoster) -> None:
    async with Scripted(lambda _: (OK, False)) as server:
        port = server.port
    with pytest.raises(Unreachable):
        await poster.post(_request(f"http://127.0.0.1:{port}/"))


async def test_the_rules_hold_when_a_connection_is_made() -> None:
    poster = HttpPoster(EndpointRules(deny="127.0.0.0/8"), timeout=5.0, connect_timeout=2.0)
    async with Scripted(lambda _: (OK, False)) as server:
        for url in (server.url(), f"http://localhost:{server.port}/hook"):
            with pytest.raises(Unreachable, match="deny"):
                await poster.post(_request(url))
        assert server.connections == 0
    await poster.close()


async def test_the_request_as_sent(poster: HttpPoster) -> None:
    async with Scripted(lambda _: (OK, False)) as server:
        url = f"http://127.0.0.1:{server.port}/h\u00e9/x?q=\u00e9&r=1 2"
        await poster.post(Request(url, {"x-amz-sns-message-type": "Notification"}, b"body"))
        head, _, body = server.requests[0].partition(b"\r\n\r\n")
        lines = head.decode("ascii").split("\r\n")
        assert lines[0] == "POST /h%C3%A9/x?q=%C3%A9&r=1%202 HTTP/1.1"
        headers = dict(line.split(": ", 1) for line in lines[1:])
        assert headers == {
            "Host": f"127.0.0.1:{server.port}",
            "x-amz-sns-message-type": "Notification",
            "Content-Length": "4",
        }
        assert body == b"body"


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> tuple[trustme.CA, Path]:
    ca = trustme.CA(organization_name="dynamiq test endpoints")
    path = tmp_path_factory.mktemp("endpoint-ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return ca, path


def _serving_tls(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    return context


async def test_https_with_the_operator_s_authority(authority: tuple[trustme.CA, Path]) -> None:
    ca, ca_file = authority
    receiver = await asyncio.to_thread(Receiver, None, 0.0, _serving_tls(ca))
    trusting = HttpPoster(EndpointRules(), 5.0, 2.0, cafile=str(ca_file))
    system_only = HttpPoster(EndpointRules(), 5.0, 2.0)
    try:
        assert receiver.url.startswith("https://")
        assert await trusting.post(_request(receiver.url, b"secret")) == 200
        assert [d.body for d in receiver.got] == [b"secret"]
        with pytest.raises(Unreachable, match="certificate"):
            await system_only.post(_request(receiver.url))
        assert len(receiver.got) == 1
    finally:
        await trusting.close()
        await system_only.close()
        await asyncio.to_thread(receiver.close)


@pytest.fixture
async def trusting_node(
    tmp_path: Path, authority: tuple[trustme.CA, Path]
) -> AsyncIterator[TestClient[Any, Any]]:
    """A node that trusts the endpoints' authority (``push.cafile``)."""
    flags = {"storage.path": str(tmp_path / "data"), "push.cafile": str(authority[1])}
    client = await node_client_with(flags)
    yield client
    await client.close()


async def test_a_node_pushes_to_an_https_webhook(
    trusting_node: TestClient[Any, Any], authority: tuple[trustme.CA, Path]
) -> None:
    receiver = await asyncio.to_thread(Receiver, None, 0.0, _serving_tls(authority[0]))
    try:
        await confirmed_webhook(trusting_node, receiver)
        messages = {"messages": [{"body": "over tls"}]}
        await trusting_node.post("/v2/topics/orders/messages", json=messages)
        got = await receiver.arrived("Notification")
        assert got[0].message() == "over tls"
    finally:
        await asyncio.to_thread(receiver.close)
