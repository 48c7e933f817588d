"""The HTTP client deliveries go through: HTTP/1.1 of its own, held to the endpoint rules.

A delivery is one POST and one status: no redirects followed (a 3xx is an
answer like any other), no cookies, no body kept. A general client spends
most of a delivery's time on what a delivery does not use, so this one does
only that, over asyncio's transports (TLS included):

- each connection is checked against ``EndpointRules`` when it is made: the
  host's name is resolved and every address it resolves to must pass (an
  address in the URL is checked as written);
- bounded connect and total times; an answer's head up to
  ``MAX_HEAD_BYTES``, its body read up to ``MAX_ANSWER_BYTES`` (by
  ``Content-Length``, chunked, or to the close), interim ``1xx`` answers
  passed over;
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

from dynamiq.core.push.documents import Request
from dynamiq.errors import Invalid
from dynamiq.push.endpoints import EndpointRules, Unreachable, port_of, resolve

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
    """One connection to an endpoint: a request at a time, its answer's status."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reusable = False
        self.used = 0.0  # monotonic seconds of its last answer
        self._buffer = bytearray()
        self._answer: asyncio.Future[int] | None = None
        self._status = 0
        self._body_at = -1  # where the final answer's body starts, once its head is in
        self._length: int | None = None
        self._chunked = False
        self._keep = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        answer = self._answer
        if answer is None or answer.done():
            return
        if self._body_at >= 0 and self._length is None and not self._chunked:
            answer.set_result(self._status)  # a body that ends with the connection
        elif not self._buffer and self.used:
            answer.set_exception(_Stale())
        else:
            answer.set_exception(ConnectionResetError("the endpoint closed the connection"))

    def send(self, data: bytes) -> asyncio.Future[int]:
        assert self.transport is not None
        self.reusable = False
        self._buffer.clear()
        self._body_at, self._length, self._chunked = -1, None, False
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
        self._buffer += data
        try:
            status = self._parse()
        except ValueError as exc:
            answer.set_exception(ConnectionError(f"a malformed answer: {exc}"))
            self.close()
            return
        if status is not None:
            answer.set_result(status)
            self.used = time.monotonic()
            if not self.reusable:
                self.close()

    def _parse(self) -> int | None:
        """The status once the answer is complete (or its body over the bound)."""
        while self._body_at < 0:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD_BYTES:
                    raise ValueError("its head is too long")
                return None
            self._head(bytes(self._buffer[:end]))
            if 100 <= self._status < 200 and self._status != 101:
                del self._buffer[: end + 4]  # an interim answer: the final one follows
                continue
            self._body_at = end + 4
        body = len(self._buffer) - self._body_at
        if self._chunked:
            done = _chunked_end(bytes(self._buffer[self._body_at :]))
        elif self._length is not None:
            done = body >= self._length
            if body > self._length:
                self._keep = False  # more than it said: not to be reused
        else:
            done = False  # to the close
        if done:
            self.reusable = self._keep
            return self._status
        if body > MAX_ANSWER_BYTES:
            return self._status  # read no further; reusable stays False: closed
        return None

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        if not version.startswith("HTTP/1.") or not rest[:3].isdigit():
            raise ValueError(f"not an HTTP/1 status line: {lines[0][:80]!r}")
        self._status = int(rest[:3])
        headers = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise ValueError(f"not a header: {line[:80]!r}")
            headers[name.strip().lower()] = value.strip().lower()
        connection = headers.get("connection", "")
        self._keep = "close" not in connection and (
            version == "HTTP/1.1" or "keep-alive" in connection
        )
        self._chunked = "chunked" in headers.get("transfer-encoding", "")
        length = headers.get("content-length")
        if self._status in (204, 304):
            self._length = 0
        elif length is not None and not self._chunked:
            if not length.isdigit():
                raise ValueError(f"Content-Length {length[:20]!r}")
            self._length = int(length)
        else:
            self._length = None
            self._keep = self._keep and self._chunked  # else the body ends with the close


def _chunked_end(data: bytes) -> bool:
    """Whether ``data`` holds a whole chunked body (``ValueError``: it is malformed)."""
    at = 0
    while True:
        end = data.find(b"\r\n", at)
        if end < 0:
            return False
        size_text = data[at:end].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ValueError(f"chunk size {size_text[:20]!r}") from None
        if size == 0:  # the last chunk, then trailers up to an empty line
            rest = data[end + 2 :]
            return rest.startswith(b"\r\n") or b"\r\n\r\n" in rest
        at = end + 2 + size + 2
        if at > len(data):
            return False


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
