"""A request the front end lends to aiohttp: the transport aiohttp writes through, and
how aiohttp says it has answered.

The front end keeps a connection for its life and lends aiohttp one request
at a time: it passes aiohttp that request's bytes, and nothing beyond them,
through the connection's own aiohttp protocol (made at the first loan, kept
for the next ones). aiohttp writes its answer through a ``Lent`` transport,
which passes everything to the connection's transport but a close: while a
request is lent, aiohttp's close is the connection's; between loans it is
aiohttp giving up an idle protocol (its keep-alive timer), which costs the
connection nothing. ``Answered``, aiohttp's access log, is called once an
answer is written; it tells the connection, which reads the next request
itself.

aiohttp's ``FileResponse`` sends a file with ``loop.sendfile`` on the
request's transport, which must be the loop's own: a request that answers
with a file is not lent (the front end hands its connection over instead).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

__all__ = ["Answered", "Lender", "Lent"]


class Lender(Protocol):
    """The front end's side of a connection whose requests are lent to aiohttp."""

    @property
    def lending(self) -> bool:
        """Whether aiohttp holds a request of the connection."""

    def answered(self, keep_alive: bool) -> None:
        """aiohttp has written its answer (``keep_alive``: whether it keeps the
        connection open)."""

    def given_up(self) -> None:
        """aiohttp closed its protocol between loans."""

    def pause(self, paused: bool) -> None:
        """aiohttp wants the connection's reading paused (or no longer)."""


class Lent(asyncio.Transport):
    """The transport of the aiohttp protocol a connection lends its requests to."""

    def __init__(
        self, transport: asyncio.Transport, lender: Lender, protocol: asyncio.Protocol
    ) -> None:
        super().__init__()
        self._transport = transport
        self._lender: Lender | None = lender
        self.protocol = protocol  # aiohttp's, which the requests are lent to

    def detach(self) -> None:
        """The connection is done with this protocol: what it does next is not the
        connection's (its close, its last word)."""
        self._lender = None

    def answered(self, keep_alive: bool) -> None:
        """aiohttp has answered the request lent through this transport."""
        if self._lender is not None:
            self._lender.answered(keep_alive)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._transport.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self._transport.writelines(list_of_data)

    def write_eof(self) -> None:
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def close(self) -> None:
        self._end(self._transport.close)

    def abort(self) -> None:
        self._end(self._transport.abort)

    def _end(self, end: Callable[[], None]) -> None:
        """aiohttp ends its connection: while a request is lent, that is the
        connection's end (``end``); between loans, its protocol's alone."""
        lender = self._lender
        if lender is None:
            return
        if lender.lending:
            end()
        else:
            lender.given_up()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        if self._lender is not None:
            self._lender.pause(True)

    def resume_reading(self) -> None:
        if self._lender is not None:
            self._lender.pause(False)

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()


class Answered(AbstractAccessLogger):
    """aiohttp's access log, which logs nothing: it tells a lent request's connection
    that its answer is written (aiohttp calls it after the answer's last byte)."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        transport = request.transport
        if isinstance(transport, Lent):
            transport.answered(bool(response.keep_alive))
