"""The HTTP client deliveries go through: aiohttp, held to the endpoint rules.

Every address a delivery connects to passes ``EndpointRules`` first (names
are resolved by the client's own resolver, which checks each answer; a URL
with an address in it is checked as written). Redirects are not followed (a
3xx is an answer like any other); bounded connect and total times; an
answer's body is read up to ``MAX_ANSWER_BYTES``. Connections are kept alive
across deliveries to one endpoint; one whose answer was longer is closed
rather than read to its end.
"""

from __future__ import annotations

import ipaddress
import socket

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from dynamiq.core.routing.push import Request
from dynamiq.endpoints import EndpointRules, Unreachable
from dynamiq.errors import Invalid

__all__ = ["MAX_ANSWER_BYTES", "HttpPoster"]

MAX_ANSWER_BYTES = 8192
CHECKED_URLS = 10_000


class _CheckedResolver(AbstractResolver):
    """Resolves as the default resolver does, refusing addresses the rules refuse."""

    def __init__(self, rules: EndpointRules) -> None:
        self._rules = rules
        self._inner = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        try:
            for answer in found:
                self._rules.address(host, answer["host"], port)
        except Invalid as refused:
            raise OSError(str(refused)) from None
        return found

    async def close(self) -> None:
        await self._inner.close()


class HttpPoster:
    """POSTs deliveries, keeping connections to endpoints alive."""

    def __init__(self, rules: EndpointRules, timeout: float, connect_timeout: float) -> None:
        self._rules = rules
        self._timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=connect_timeout)
        self._session: aiohttp.ClientSession | None = None
        self._checked: dict[str, None] = {}  # URLs whose address was checked (an LRU's keys)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                resolver=_CheckedResolver(self._rules), limit=0, limit_per_host=0
            )
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, auto_decompress=False
            )
        return self._session

    async def post(self, request: Request) -> int:
        """POST ``request``; return the answer's status (``Unreachable``: no answer)."""
        try:
            self._check_literal(request.url)
            async with self._open().post(
                request.url,
                data=request.body,
                headers=request.headers,
                allow_redirects=False,
            ) as answer:
                await answer.content.read(MAX_ANSWER_BYTES)
                return answer.status
        except (aiohttp.ClientError, TimeoutError, OSError, Invalid) as exc:
            raise Unreachable(str(exc) or type(exc).__name__) from None

    def _check_literal(self, url: str) -> None:
        """Check a URL whose host is an address (the resolver never sees those); the
        rules do not change while the node runs, so each URL once."""
        if url in self._checked:
            return
        parts = self._rules.url(url)
        host = (parts.hostname or "").strip("[]")
        try:
            ipaddress.ip_address(host)
        except ValueError:
            host = ""  # a name: the resolver checks what it resolves to
        if host:
            self._rules.address(host, host, parts.port or (443 if parts.scheme == "https" else 80))
        if len(self._checked) >= CHECKED_URLS:
            del self._checked[next(iter(self._checked))]
        self._checked[url] = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
