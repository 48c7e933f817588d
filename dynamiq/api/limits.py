"""What one node takes on at once: connections, request bodies, and how long a body may take.

Beyond ``limits.maxconnections`` a new connection is answered 503 and closed
before it costs a request handler. A request's body is read here, before
its route runs, within ``limits.bodytimeout`` (408 beyond it), and only
while the bodies held by the node's requests stay within
``limits.maxpendingbytes``: past that a request waits its turn, in arrival
order, for up to ``api.intake.ADMIT_SECONDS``, then gets 503. That bound is the
publish backpressure: a flood of large publishes queues in the clients and
the network, not in the node's memory. A declared ``Content-Length`` beyond
``limits.maxbodybytes`` is refused before a byte of the body is read.
Connections without a whole request's headers are closed after
``limits.idletimeout`` (aiohttp's keep-alive timer, armed from the
connection's start).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import cast

from aiohttp import web
from aiohttp.typedefs import Handler

from dynamiq.api.context import services_of
from dynamiq.api.front.connection import Front
from dynamiq.errors import PayloadTooLarge, RequestTimeout

__all__ = ["LimitedSite", "admitted", "late_body"]

log = logging.getLogger("dynamiq.api")


def admitted(handler: Handler) -> Handler:
    """Return ``handler`` behind the body's limits: size declared, room held, time to arrive."""

    async def admit(request: web.Request) -> web.StreamResponse:
        if not request.body_exists:
            return await handler(request)
        services = services_of(request)
        most, declared = request.client_max_size, request.content_length
        if declared is not None and declared > most:
            raise PayloadTooLarge(f"the body is {declared} bytes; at most {most} are taken")
        size = most if declared is None else declared
        await services.intake.take(size)
        try:
            if request.content.is_eof():  # it came with the headers: nothing to wait for
                await request.read()  # kept: the route's own read returns it
            else:
                await _arrival(request, services.node.limits.bodytimeout)
            return await handler(request)
        finally:
            services.intake.give(size)

    return admit


async def _arrival(request: web.Request, seconds: float) -> None:
    """Read the body of ``request`` as it arrives, for at most ``seconds``."""
    try:
        async with asyncio.timeout(seconds):
            await request.read()
    except TimeoutError:
        raise late_body(seconds) from None


def late_body(seconds: float) -> RequestTimeout:
    """The error of a body that did not arrive within ``seconds``."""
    return RequestTimeout(f"the body did not arrive within {seconds:g} s (limits.bodytimeout)")


_BUSY_BODY = (
    b'{"error":"OVERLOADED","message":"this node has as many connections open as it takes'
    b' (limits.maxconnections); try again"}'
)
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Retry-After: 1\r\nConnection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)
LINGER_SECONDS = 1.0  # how long a refused connection is read (and dropped) before closing


class _Busy(asyncio.Protocol):
    """A connection over the limit: told so at once, read for a moment (so that the
    answer is not lost to a reset while its request still arrives), then closed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self._transport = transport
        transport.write(_BUSY)
        self._closing = asyncio.get_running_loop().call_later(LINGER_SECONDS, transport.close)

    def data_received(self, data: bytes) -> None:
        """Dropped: nothing here is answered but the refusal."""

    def eof_received(self) -> bool:
        self._transport.close()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing.cancel()


class LimitedSite(web.SockSite):
    """A site on a bound socket that takes at most ``most`` connections at once, each
    opened by the node's ``front`` end (when it has one) and aiohttp's otherwise."""

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: socket.socket,
        most: int,
        backlog: int,
        ssl_context: ssl.SSLContext | None = None,
        front: Front | None = None,
    ) -> None:
        super().__init__(runner, sock, backlog=backlog, ssl_context=ssl_context)
        self._most = most
        self._front = front

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        most, front = self._most, self._front
        # At least as many as are open: every connection opens here, and closes
        # elsewhere. Counted afresh only when it reaches the limit, since the
        # server's count copies a list of every connection.
        bound = 0

        def accept() -> asyncio.BaseProtocol:
            nonlocal bound
            if bound >= most:
                bound = len(server.connections)
                if front is not None:  # less those counted in both
                    bound += len(front.connections) - front.lent
                if bound >= most:
                    log.debug("connection refused: %d open (limits.maxconnections)", most)
                    return _Busy()
            bound += 1
            return server() if front is None else front.open(server)

        self._server = await asyncio.get_running_loop().create_server(
            accept, sock=self._sock, ssl=self._ssl_context, backlog=self._backlog
        )

    async def stop(self) -> None:
        if self._front is not None:
            self._front.closing_down()
        await super().stop()
