"""The HTTP client deliveries go through: HTTP/1.1 kept to one POST, held to the endpoint rules.

A delivery is one POST and one status: no redirects followed (a 3xx is an
answer like any other), no cookies, no body kept. A general client spends
most of a delivery's time on what a delivery does not use, so this one does
only that, over asyncio's transports (TLS included):

- each connection is checked against ``EndpointRules`` when it is made: the
  host's name is resolved and every address it resolves to must pass (an
  address in the URL is checked as written);
- bounded connect and total times; an answer read by llhttp (Node.js's
  parser, through ``httptools``), its head up to ``MAX_HEAD_BYTES``, its
  body up to ``MAX_ANSWER_BYTES`` (by ``Content-Length``, chunked, or to the
  close), interim ``1xx`` answers passed over;
- connections are kept alive across deliveries to one origin and closed
  after ``IDLE_SECONDS`` unused; one whose answer was longer, malformed or
  said ``Connection: close`` is closed instead. A kept connection the
  endpoint closed meanwhile is found out by the next request's first bytes
  (nothing answered): that request is sent again once on a new connection.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import defaultdict
from urllib.parse import SplitResult, quote

import httptools

from dynamiq.errors import Invalid
from dynamiq.push.endpoints import EndpointRules, Unreachable, port_of, resolve
from dynamiq.push.request import Request

__all__ = ["MAX_ANSWER_BYTES", "HttpPoster"]

MAX_ANSWER_BYTES = 8192
MAX_HEAD_BYTES = 16384
IDLE_SECONDS = 30.0  # under the usual servers' own keep-alive limits
KNOWN_URLS = 10_000  # URLs whose request line is kept
URL_SAFE = "/%:@!$&'()*+,;=-._~"  # what a path may hold as it is (RFC 3986)

Origin = tuple[str, str, int]  # scheme, host, port


class _Stale(Exception):
    """A kept connection closed before answering anything: send again on a new one."""


class _Connection(asyncio.Protocol):
    """One connection to an endpoint: a request at a time, its answer's status.

    The answer is read by llhttp (``httptools``): its status, whether it may be
    kept, where its body ends (a length, chunks, or the close).
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reusable = False
        self.used = 0.0  # monotonic seconds of its last answer
        self._answer: asyncio.Future[int] | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._got = 0  # bytes of the answer so far
        self._status = 0  # the final answer's, once its head is in
        self._body = 0  # bytes of its body so far
        self._delimited = False  # its body has a length or chunks (else: to the close)
        self._keep = False  # the answer lets the connection be kept
        self._complete = False
        self._beyond = False  # bytes came after the answer's end

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        answer = self._answer
        if answer is None or answer.done():
            return
        if self._status and not self._delimited:
            answer.set_result(self._status)  # a body that ends with the connection
        elif not self._got and self.used:
            answer.set_exception(_Stale())
        else:
            answer.set_exception(ConnectionResetError("the endpoint closed the connection"))

    def send(self, data: bytes) -> asyncio.Future[int]:
        assert self.transport is not None
        self.reusable = False
        self._parser = httptools.HttpResponseParser(self)
        self._got = self._status = self._body = 0
        self._delimited = self._keep = self._complete = self._beyond = False
        self._answer = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self._answer

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    def fresh(self, now: float) -> bool:
        """Whether it may carry another request: kept, and used lately."""
        return self.reusable and now - self.used < IDLE_SECONDS

    def data_received(self, data: bytes) -> None:
        answer = self._answer
        if answer is None or answer.done():
            self.close()  # bytes nobody asked for: the connection is not to be trusted
            return
        self._got += len(data)
        try:
            self._parser.feed_data(data)
            if not self._status and self._got > MAX_HEAD_BYTES:
                raise ValueError("its head is too long")
        except (ValueError, httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if not self._complete:  # what follows a whole answer only keeps it from reuse
                answer.set_exception(ConnectionError(f"a malformed answer: {exc}"))
                self.close()
                return
            self._beyond = True
        if self._complete or (self._status and self._body > MAX_ANSWER_BYTES):
            # Read no further past the bound: not kept, so closed.
            self.reusable = self._complete and self._keep and not self._beyond
            answer.set_result(self._status)
            self.used = time.monotonic()
            if not self.reusable:
                self.close()

    # llhttp's callbacks, in the order it reads an answer.

    def on_message_begin(self) -> None:
        self._beyond = self._beyond or self._complete

    def on_header(self, name: bytes, _: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self._delimited = True

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self._delimited = False  # an interim answer: the final one follows
            return
        self._status = status
        self._delimited = self._delimited or status in (204, 304)
        self._keep = self._parser.should_keep_alive()  # read here: llhttp resets it after

    def on_body(self, body: bytes) -> None:
        self._body += len(body)

    def on_message_complete(self) -> None:
        self._complete = self._complete or self._status != 0


class HttpPoster:
    """POSTs deliveries, keeping connections to endpoints alive."""

    def __init__(
        self,
        rules: EndpointRules,
        timeout: float,
        connect_timeout: float,
        cafile: str = "",
    ) -> None:
        self._rules = rules
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._cafile = cafile
        self._tls: ssl.SSLContext | None = None
        self._idle: defaultdict[Origin, list[_Connection]] = defaultdict(list)
        self._swept = time.monotonic()
        self._urls: dict[str, tuple[Origin, str]] = {}

    async def post(self, request: Request) -> int:
        """POST ``request``; return the answer's status (``Unreachable``: no answer)."""
        try:
            async with asyncio.timeout(self._timeout):
                origin, start = self._prepared(request.url)
                data = _request_bytes(start, request)
                try:
                    return await self._exchange(origin, data, kept=True)
                except _Stale:
                    return await self._exchange(origin, data, kept=False)
        except (TimeoutError, OSError, Invalid, UnicodeError, _Stale) as exc:
            raise Unreachable(str(exc) or type(exc).__name__) from None

    def _prepared(self, url: str) -> tuple[Origin, str]:
        """Where ``url`` connects to, and its request's first lines (kept per URL)."""
        known = self._urls.get(url)
        if known is None:
            parts = self._rules.url(url)
            known = _origin(parts), _request_start(parts)
            if len(self._urls) >= KNOWN_URLS:
                del self._urls[next(iter(self._urls))]
            self._urls[url] = known
        return known

    async def _exchange(self, origin: Origin, data: bytes, kept: bool) -> int:
        connection = self._kept(origin) if kept else None
        if connection is None:
            connection = await self._connect(origin)
        try:
            status = await connection.send(data)
        except BaseException:
            connection.close()
            raise
        if connection.reusable:
            self._idle[origin].append(connection)
        return status

    def _kept(self, origin: Origin) -> _Connection | None:
        now = time.monotonic()
        if now - self._swept > IDLE_SECONDS:
            self._sweep(now)
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if connection.fresh(now):
                return connection
            connection.close()
        return None

    def _sweep(self, now: float) -> None:
        """Close connections unused for ``IDLE_SECONDS`` (origins no longer pushed to)."""
        self._swept = now
        for origin, idle in list(self._idle.items()):
            kept = [c for c in idle if c.fresh(now)]
            for connection in idle:
                if connection not in kept:
                    connection.close()
            if kept:
                self._idle[origin] = kept
            else:
                del self._idle[origin]

    async def _connect(self, origin: Origin) -> _Connection:
        scheme, host, port = origin
        addresses = await resolve(host, port)
        for address in addresses:
            self._rules.address(host, address, port)  # every one, before any is tried
        tls = None
        if scheme == "https":
            tls = self._tls or await asyncio.to_thread(self._tls_context)
        loop = asyncio.get_running_loop()
        failed: Exception = OSError(f"no address for {host}")
        async with asyncio.timeout(self._connect_timeout):
            for address in addresses:
                try:
                    _, connection = await loop.create_connection(
                        _Connection,
                        address,
                        port,
                        ssl=tls,
                        server_hostname=host if tls else None,
                    )
                    return connection
                except OSError as exc:
                    failed = exc
        raise failed

    def _tls_context(self) -> ssl.SSLContext:
        """The system's trusted certificates, and ``cafile``'s (made once, off the
        event loop: loading them reads files)."""
        if self._tls is None:
            self._tls = ssl.create_default_context()
            if self._cafile:
                self._tls.load_verify_locations(self._cafile)
        return self._tls

    async def close(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()


def _origin(parts: SplitResult) -> Origin:
    return parts.scheme, parts.hostname or "", port_of(parts)


def _request_start(parts: SplitResult) -> str:
    """A request's line and ``Host``: the path and query as sent (characters outside
    ASCII percent-encoded), the host as the URL names it (outside ASCII, in IDNA)."""
    target = quote(parts.path or "/", safe=URL_SAFE)
    if parts.query:
        target = f"{target}?{quote(parts.query, safe=URL_SAFE + '?')}"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    elif not host.isascii():
        host = host.encode("idna").decode("ascii")
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return f"POST {target} HTTP/1.1\r\nHost: {host}\r\n"


def _request_bytes(start: str, request: Request) -> bytes:
    headers = "".join(f"{name}: {value}\r\n" for name, value in request.headers.items())
    head = f"{start}{headers}Content-Length: {len(request.body)}\r\n\r\n"
    return head.encode("latin-1") + request.body
