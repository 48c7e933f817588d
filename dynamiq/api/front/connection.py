"""The node's front end: every connection opens here; the hot routes are served here,
the others by aiohttp.

Under aiohttp a request costs the node about 160 µs of CPU over its life
before any route of ours runs (a connection's protocol, streams and timers,
a request object, a response object), and a burst of 2,000 long polls kept
a request that arrived with them waiting 200 ms behind their arrivals. Here
a connection is a buffer and a timer; a request of a route served here
(``Lookup`` says which) is its head, read once (``http1``), its body, and an
answer written in one piece.

A request of another route is lent to aiohttp (``lent``): aiohttp reads that
request alone, answers it as if the connection were its own, and the front
end reads the next one (aiohttp's runner must take ``lent.Answered`` as its
access log, which says when aiohttp has answered). A request the front end
does not read as surely as aiohttp would, one that ``Front.lends`` keeps
from aiohttp's loans (a file's), or the next loan after ``LOANS_IN_A_ROW``
of them, hands the connection to aiohttp for the rest of its life: what it
has read so far goes with it, from the start of that request.

A connection here keeps aiohttp's terms: at most one request served at a
time, in order (a pipelined one waits in the buffer); closed after
``idle_seconds`` without a whole request's head (armed when it opens and
after each answer); a body beyond ``max_body`` is aiohttp's to refuse; a
client that goes away does not cancel its request (a long poll watches for
it); at shutdown the requests under way are answered, within
``shutdown_seconds``, and each connection is closed after its answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import cast

from aiohttp import web

from dynamiq.api.front.http1 import MAX_HEAD, Head, answer, parse_head
from dynamiq.api.front.lent import Lent

__all__ = ["FRONT", "Connection", "Front", "Lookup", "Reply", "Route"]

log = logging.getLogger("dynamiq.api")

# A pipelined client may send this much beyond what the request under way awaits
# before the connection stops being read.
READ_AHEAD = 256 * 1024
# After this many requests in a row lent to aiohttp, a connection is aiohttp's for
# good: its client (an SQS SDK, a v1 client) speaks no route served here, and a
# loan costs more than aiohttp reading the connection itself.
LOANS_IN_A_ROW = 8


class Reply:
    """An answer of a route served here: status, JSON body and further headers."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, body: bytes, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.status = status
        self.body = body
        self.headers = headers


# A route served here: its answer to a request, or None when the client went away.
Route = Callable[[Head, "Connection"], Awaitable[Reply | None]]
# Which route serves a request's head; None: aiohttp does.
Lookup = Callable[[Head], Route | None]


class Front:
    """What a node's connections share: the routes served here, the limits, the open
    connections."""

    def __init__(
        self,
        lookup: Lookup,
        lends: Callable[[Head], bool],
        idle_seconds: float,
        max_body: int,
        shutdown_seconds: float,
    ) -> None:
        self.lookup = lookup
        self.lends = lends  # whether a request of aiohttp's may be lent to it
        self.idle_seconds = idle_seconds
        self.max_body = max_body
        self.shutdown_seconds = shutdown_seconds
        self.connections: set[Connection] = set()
        self.closing = False

    @property
    def lent(self) -> int:
        """Of the connections, those with an aiohttp protocol for their loans, which
        aiohttp counts among its own connections too."""
        return sum(1 for connection in self.connections if connection.lent is not None)

    def open(self, fallback: Callable[[], asyncio.BaseProtocol]) -> Connection:
        """A new connection's protocol (``fallback``: aiohttp's, for the other routes)."""
        return Connection(self, fallback)

    def closing_down(self) -> None:
        """Close the idle connections now, and the others after their answer (as aiohttp
        does once its site stops)."""
        self.closing = True
        for connection in list(self.connections):
            if connection.task is None and not connection.lending:
                connection.transport.close()

    async def on_shutdown(self, _: web.Application) -> None:
        """Answer the requests under way, within ``shutdown_seconds`` (the node has
        answered its long polls by now), and close every connection."""
        self.closing_down()
        busy = [c.task for c in self.connections if c.task is not None]
        if not busy:
            return
        unanswered = (await asyncio.wait(busy, timeout=self.shutdown_seconds))[1]
        for task in unanswered:
            task.cancel()
        for connection in list(self.connections):
            connection.transport.close()


FRONT = web.AppKey("front", Front)


class Connection(asyncio.Protocol):
    """One client connection, until it closes or goes to aiohttp."""

    def __init__(self, front: Front, fallback: Callable[[], asyncio.BaseProtocol]) -> None:
        self._front = front
        self._fallback = fallback
        self._buffer = bytearray()
        self._arrived: asyncio.Future[None] | None = None  # a body awaited
        self._wanted = 0  # bytes of body awaited
        self._untaken = 0  # bytes of the request's body not read yet
        self._paused = False  # reading, for the buffer's sake
        self._idle: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None  # the request under way
        self.transport = cast(asyncio.Transport, None)
        # The transport of the aiohttp protocol requests are lent to, once one was.
        self.lent: Lent | None = None
        self.lending = False  # a request is aiohttp's: not answered, or its body not all passed
        self._loans = 0  # requests lent since the last one served here
        self._answered = False
        self._owed = 0  # bytes of the lent request's body not passed to aiohttp yet
        self._kept = True  # whether aiohttp's answer left the connection open
        self._held = False  # reading paused by aiohttp

    # -- the connection's life ------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self._front.connections.add(self)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._owed:
            data = self._pass(data)
            if not data:
                return
        self._buffer += data
        if self.task is None and not self.lending:
            self._next()
            return
        arrived = self._arrived
        if arrived is not None and len(self._buffer) >= self._wanted and not arrived.done():
            arrived.set_result(None)
        if len(self._buffer) > self._wanted + READ_AHEAD and not self._paused:
            self._paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        return None  # closed, as aiohttp closes a half-closed connection

    def connection_lost(self, exc: Exception | None) -> None:
        self._front.connections.discard(self)
        if self._idle is not None:
            self._idle.cancel()
        arrived = self._arrived
        if arrived is not None and not arrived.done():
            arrived.set_exception(ConnectionResetError("the client closed the connection"))
        aiohttp = self._forget_aiohttp()
        if aiohttp is not None:
            aiohttp.connection_lost(exc)  # its request, if it has one, is cancelled

    def pause_writing(self) -> None:
        if self.lent is not None:
            self.lent.protocol.pause_writing()  # aiohttp's writes wait for the client

    def resume_writing(self) -> None:
        if self.lent is not None:
            self.lent.protocol.resume_writing()

    @property
    def remote(self) -> str:
        """The client's address, as aiohttp's ``request.remote`` gives it."""
        peer = self.transport.get_extra_info("peername")
        return str(peer[0]) if isinstance(peer, list | tuple) else str(peer or "")

    async def body(self, head: Head, seconds: float) -> bytes:
        """The request's body, once it has arrived.

        Raises:
            TimeoutError: it did not arrive within ``seconds``.
            ConnectionResetError: the client went away first.
        """
        need = head.length
        if len(self._buffer) < need:
            self._wanted = need
            self._arrived = asyncio.get_running_loop().create_future()
            self._resume()
            try:
                async with asyncio.timeout(seconds):
                    await self._arrived
            finally:
                self._arrived, self._wanted = None, 0
        with memoryview(self._buffer) as view:
            body = bytes(view[:need])  # one copy
        del self._buffer[:need]
        self._untaken = 0
        return body

    # -- requests -------------------------------------------------------------

    def _next(self) -> None:
        """Serve the request at the head of the buffer, lend it to aiohttp, or hand the
        connection over."""
        if self.transport.is_closing():  # after an answer that closed it
            return
        buffer = self._buffer
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > MAX_HEAD:
                self._hand_over()
            return
        head = parse_head(bytes(buffer[:end])) if end <= MAX_HEAD else None
        if head is None or head.length > self._front.max_body:
            self._hand_over()
            return
        route = self._front.lookup(head)
        if route is None and (self._loans >= LOANS_IN_A_ROW or not self._front.lends(head)):
            self._hand_over()
            return
        if self._idle is not None:
            self._idle.cancel()
        if route is None:
            self._lend(end + 4 + head.length)
            return
        del buffer[: end + 4]
        self._untaken = head.length
        self._loans = 0
        self.task = asyncio.get_running_loop().create_task(self._serve(head, route))

    async def _serve(self, head: Head, route: Route) -> None:
        try:
            reply = await route(head, self)
        except BaseException:
            self.transport.close()
            raise
        finally:
            self.task = None
        if reply is None or self.transport.is_closing():
            self.transport.close()
            return
        untaken = self._untaken  # a body the route did not read: dropped if it is here
        keep = head.keep_alive and not self._front.closing
        keep = keep and len(self._buffer) >= untaken
        self.transport.write(answer(head, reply.status, reply.body, reply.headers, keep))
        if not keep:
            self.transport.close()
            return
        del self._buffer[:untaken]
        self._read_on()

    def _read_on(self) -> None:
        """After an answer: wait for the next request, or serve it if it is here."""
        self._resume()
        self._arm()
        if self._buffer:
            self._next()

    def _hand_over(self) -> None:
        """Give the connection to aiohttp, with what it sent from the request it is at."""
        if self._idle is not None:
            self._idle.cancel()
        self._front.connections.discard(self)
        aiohttp = self._forget_aiohttp()
        if aiohttp is not None:
            aiohttp.connection_lost(None)  # idle: its loans are over
        protocol = self._fallback()
        transport = self.transport
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if self._buffer:
            cast(asyncio.Protocol, protocol).data_received(bytes(self._buffer))
        self._buffer.clear()
        self._resume()

    # -- requests lent to aiohttp (the ``Lender`` of ``lent``) ---------------------

    def _lend(self, size: int) -> None:
        """Give aiohttp the request at the head of the buffer (``size`` bytes with its
        body) and nothing after it."""
        if self.lent is None:
            self.lent = Lent(self.transport, self, cast(asyncio.Protocol, self._fallback()))
            self.lent.protocol.connection_made(self.lent)
        aiohttp = self.lent.protocol
        self.lending, self._answered, self._kept = True, False, True
        self._loans += 1
        buffer = self._buffer
        taken = min(size, len(buffer))
        self._owed = size - taken
        request = bytes(buffer[:taken])
        del buffer[:taken]
        aiohttp.data_received(request)

    def _pass(self, data: bytes) -> bytes:
        """Pass aiohttp what it is owed of the lent request's body from ``data``; the
        rest."""
        assert self.lent is not None
        aiohttp = self.lent.protocol
        owed = self._owed
        if len(data) < owed:
            self._owed -= len(data)
            aiohttp.data_received(data)
            return b""
        self._owed = 0
        aiohttp.data_received(data[:owed])
        if self._answered:
            self._take_back()
        return data[owed:]

    def answered(self, keep_alive: bool) -> None:
        """aiohttp has written its answer to the lent request."""
        self._answered, self._kept = True, keep_alive
        if not self._owed:
            self._take_back()

    def _take_back(self) -> None:
        """The lent request is over: read the next one here."""
        self.lending = False
        if not self._kept or self._front.closing:
            self.transport.close()
            return
        self._read_on()

    def given_up(self) -> None:
        """aiohttp closed its protocol between loans (it was idle as long as it keeps a
        connection): the next loan makes another."""
        aiohttp = self._forget_aiohttp()
        if aiohttp is not None:
            # Out of aiohttp's count of connections, once its close has run.
            asyncio.get_running_loop().call_soon(aiohttp.connection_lost, None)

    def pause(self, paused: bool) -> None:
        """Pause the connection's reading for aiohttp, or no longer."""
        self._held = paused
        with contextlib.suppress(RuntimeError):  # closed meanwhile
            if paused:
                self.transport.pause_reading()
            elif not self._paused:  # not held for the buffer's sake
                self.transport.resume_reading()

    def _forget_aiohttp(self) -> asyncio.Protocol | None:
        """Be done with the aiohttp protocol requests were lent to; it, if there was one
        (for its ``connection_lost``)."""
        lent, self.lent = self.lent, None
        if lent is None:
            return None
        lent.detach()
        if self._held:
            self.pause(False)
        return lent.protocol

    # -- timers and flow ------------------------------------------------------

    def _arm(self) -> None:
        self._idle = asyncio.get_running_loop().call_later(self._front.idle_seconds, self._idle_out)

    def _idle_out(self) -> None:
        if self.task is None and not self.lending:
            log.debug("connection closed: no whole request within limits.idletimeout")
            self.transport.close()

    def _resume(self) -> None:
        if self._paused:
            self._paused = False
            if not self._held:
                with contextlib.suppress(RuntimeError):  # closed meanwhile
                    self.transport.resume_reading()
