"""The front end's request heads: parsed by llhttp, and taken only when aiohttp would
read them the same way; anything else is aiohttp's to answer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http_parser import HttpRequestParserPy, RawRequestMessage
from hypothesis import given, settings
from hypothesis import strategies as st

from dynamiq.api.front.http1 import answer, parse_head


@pytest.mark.parametrize(
    "head",
    [
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nExpect: 100-continue",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nUpgrade: h2c",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nContent-Length: -1",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\n Folded: on",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nX: a\x01b",
        b"POST /v2/queues/q%2Fx/receive HTTP/1.1\r\nHost: a",
        b"POST /v2/queues/q/../x/receive HTTP/1.1\r\nHost: a",
        b"POST /v2/queues/q/receive?x=1 HTTP/1.1\r\nHost: a",
        b"POST /v2/queues/q/receive HTTP/2.0\r\nHost: a",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nContent-Length: 0",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nContent-Type: json",
        b"POST  /v2/queues/q/receive HTTP/1.1\r\nHost: a",
        # Request smuggling's classics: two lengths, a length beside a chunked body, a
        # coding hidden by a space or a tab, a bare LF, a NUL, a space before the colon.
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\tchunked",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nContent-Length : 5",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\nContent-Length: 5",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nContent-Length: 5\x00",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nContent-Length: +5",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nHost: b",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nX-Name\xc3\xa9: b",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nX: a\tb",
        b"POST http://a/v2/queues/q/receive HTTP/1.1\r\nHost: a",
        b"POST /v2/queues/q/receive HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n"
        b"Upgrade: websocket",
        b"PRI * HTTP/2.0",
        b"POST /v2/queues/q/receive HTTP/1.1 \r\nHost: a",
        b"POST /v2/queues/q/receive\r\nHost: a",
    ],
)
def test_a_head_the_front_end_does_not_read_surely_goes_to_aiohttp(head: bytes) -> None:
    assert parse_head(head) is None


def test_a_plain_head_is_read_with_aiohttp_s_terms() -> None:
    head = parse_head(
        b"POST /v2/queues/q/receive HTTP/1.0\r\nHost: a:1\r\nContent-Length: 12\r\n"
        b"Content-Type: Application/JSON; charset=utf-8\r\nConnection: Keep-Alive\r\n"
        b"Authorization: Bearer k"
    )
    assert head is not None
    assert (head.method, head.path, head.version, head.length) == (
        "POST",
        "/v2/queues/q/receive",
        "1.0",
        12,
    )
    assert (head.mimetype, head.keep_alive, head.headers["authorization"]) == (
        "application/json",
        True,
        "Bearer k",
    )
    closing = parse_head(b"POST /x HTTP/1.1\r\nHost: a\r\nConnection: close")
    assert closing is not None and not closing.keep_alive
    written = answer(closing, 503, b"{}", (("Retry-After", "1"),))
    assert written.startswith(
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    )
    assert b"\r\nRetry-After: 1\r\nContent-Length: 2\r\n" in written
    assert written.endswith(b"\r\nConnection: close\r\n\r\n{}")


# Heads built from parts, mostly plain and now and then not: for each one the front
# end takes, aiohttp's own parser (its pure-Python one, written apart from llhttp)
# must read the same request, or the front end would answer what aiohttp would have
# read otherwise.


def _mostly(plain: list[bytes], odd: list[bytes], times: int = 3) -> st.SearchStrategy[bytes]:
    """Draw a plain part ``times`` times as often as an odd one (each plain part as
    often as every odd one together, with ``times`` their count over the plain's)."""
    return st.sampled_from(plain * (times * len(odd) // len(plain) + 1) + odd)


_METHODS = _mostly([b"GET", b"POST", b"PUT", b"DELETE", b"PATCH"], [b"get", b"P0ST", b"PRI"])
_PATHS = _mostly(
    [b"/v2/queues/q/receive", b"/v2/queues/app:q/messages", b"/", b"/v2/queues/q.fifo"],
    [b"/a//b", b"/a/./b", b"/a%2fb", b"/a?b=1", b"/a b", b"*", b"http://a/b", b"/caf\xc3\xa9"],
)
_VERSIONS = _mostly([b"HTTP/1.1", b"HTTP/1.0"], [b"HTTP/2.0", b"HTTP/1.2", b"http/1.1"])
_FIELDS = _mostly(
    [
        b"Content-Length: 12",
        b"Content-Length: 0",
        b"Content-Type: application/json",
        b"Content-Type: text/plain; charset=utf-8",
        b"Connection: close",
        b"Connection: Keep-Alive",
        b"Authorization: Bearer k",
        b"X-Thing:  spaced  ",
        b"Accept: */*",
    ],
    [
        b"Transfer-Encoding: chunked",
        b"Content-Length: -1",
        b"Content-Length: 1, 2",
        b"Content-Length: a",
        b"Host: b",
        b"Expect: 100-continue",
        b"Upgrade: h2c",
        b"X_Thing: a",
        b"X Thing: a",
        b"X-Thing : a",
        b": a",
        b"X-Thing: a\tb",
        b"X-Thing:\ta",
        b"X-Thing: a\x00b",
        b"X-Thing: a\x7fb",
        b"X-Thing: caf\xc3\xa9",
        b"X-Thing",
        b"Content-Type: json",
    ],
    times=8,
)
_ENDS = _mostly([b"\r\n"], [b"\n", b"\r\n ", b"\r\n\t"], times=10)
_HOSTS = _mostly([b"Host: a\r\n", b"Host: 127.0.0.1:8081\r\n"], [b"", b"Host: a\n", b"host:a\r\n"])
_HEADERS = st.lists(st.tuples(_FIELDS, _ENDS), max_size=4)


def _aiohttp_reads(raw: bytes) -> Iterator[RawRequestMessage]:
    """What aiohttp's pure-Python parser reads of ``raw``: its request, or nothing."""
    loop = asyncio.new_event_loop()
    try:
        parser = HttpRequestParserPy(BaseProtocol(loop), loop, 2**16, max_line_size=8190)
        try:
            messages, _, _ = parser.feed_data(raw + b"\r\n\r\n")
        except Exception:
            return
        for message, _ in messages:
            yield message
    finally:
        loop.close()


@settings(max_examples=3000, deadline=None)
@given(_METHODS, _PATHS, _VERSIONS, _HOSTS, _HEADERS)
def test_a_head_the_front_end_takes_is_one_aiohttp_reads_the_same_way(
    method: bytes,
    path: bytes,
    version: bytes,
    host: bytes,
    headers: list[tuple[bytes, bytes]],
) -> None:
    raw = method + b" " + path + b" " + version + b"\r\n" + host
    for field, end in headers:
        raw += field + end
    raw = raw.removesuffix(b"\r\n")
    head = parse_head(raw)
    if head is None:
        return  # aiohttp's to answer, whatever it makes of it
    [message] = list(_aiohttp_reads(raw))
    assert (message.method, message.path) == (head.method, head.path)
    assert f"{message.version.major}.{message.version.minor}" == head.version
    read = {name.lower(): value for name, value in message.headers.items()}
    assert read == head.headers
    assert message.should_close is not head.keep_alive
