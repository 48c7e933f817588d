"""Leasing messages to a client that may go away: a receive stops with its connection.

A long poll whose client disconnected would otherwise lease the next
published message to nobody, and keep it in flight for a whole visibility
timeout. Here the wait stops when the connection closes, and messages whose
answer could not be written are given back at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

from aiohttp import web

from dynamiq.api.routes import node
from dynamiq.models import Message, ReceiveRequest
from dynamiq.service.leased import Leased
from dynamiq.service.node import Node

__all__ = [
    "DEPARTURES",
    "ClientGone",
    "Departures",
    "Watched",
    "answer_for",
    "deliver",
    "lease_for",
]

R = TypeVar("R")

# How often the clients of waiting receives are looked at.
CONNECTION_CHECK_SECONDS = 0.2


class ClientGone(ConnectionResetError):
    """The client closed its connection before its answer was written."""


class Watched(Protocol):
    """A request whose client may go: aiohttp's, or one the front end serves."""

    @property
    def transport(self) -> asyncio.BaseTransport | None:
        """Its connection's transport; None once aiohttp let it go."""


class Departures:
    """The clients of waiting receives, all looked at by one timer: a receive
    whose client has gone is cancelled.

    A timer per receive costs the event loop in proportion to the receives
    waiting: 2,000 of them made 10,000 wake-ups a second, and a request
    arriving meanwhile waited its turn behind them. One look over every
    connection, each a flag read, costs microseconds.
    """

    def __init__(self) -> None:
        self._watched: dict[asyncio.Task[Any], Watched] = {}  # task: whose
        self._timer: asyncio.TimerHandle | None = None
        self._cancelled: set[asyncio.Task[Any]] = set()  # for their client's going

    def watch(self, request: Watched, task: asyncio.Task[Any]) -> None:
        """Cancel ``task`` once ``request``'s client has gone (``forget`` it after)."""
        self._watched[task] = request
        if self._timer is None:
            self._arm()

    def forget(self, task: asyncio.Task[Any]) -> bool:
        """Stop watching ``task``; return whether it was cancelled for its client's going."""
        self._watched.pop(task, None)
        if task in self._cancelled:
            self._cancelled.discard(task)
            return True
        return False

    def _look(self) -> None:
        self._timer = None
        for task, request in list(self._watched.items()):
            if _gone(request):
                del self._watched[task]
                self._cancelled.add(task)
                task.cancel()
        if self._watched:
            self._arm()

    def _arm(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(CONNECTION_CHECK_SECONDS, self._look)


DEPARTURES = web.AppKey("departures", Departures)


def _gone(request: Watched) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def deliver(
    request: web.Request, ask: ReceiveRequest, render: Callable[[list[Message]], web.Response]
) -> web.Response:
    """Lease messages for ``request`` and write ``render(messages)`` to it.

    Raises:
        ClientGone: the client went away; whatever was leased for it was given back.
    """
    serving = node(request)
    leased = await lease_for(request, request.config_dict[DEPARTURES], serving, ask)
    response = await answer_for(request, serving, ask, leased, render)
    try:
        await response.prepare(request)
        await response.write_eof()
    except ConnectionResetError:
        await serving.give_back(ask.queue, leased.messages)
        raise ClientGone("the client closed the connection") from None
    return response


async def lease_for(
    request: Watched, departures: Departures, serving: Node, ask: ReceiveRequest
) -> Leased:
    """Lease messages for ``request``; a wait stops when its client goes.

    Raises:
        ClientGone: the client went away while the receive waited.
    """
    return await serving.receive(ask, lambda waiting: _unless_gone(request, departures, waiting))


async def answer_for(
    request: Watched,
    serving: Node,
    ask: ReceiveRequest,
    leased: Leased,
    render: Callable[[list[Message]], R],
) -> R:
    """``render`` of what was leased for ``request``, to be written at once.

    Raises:
        ClientGone: the client went away; what was leased for it was given back.
    """
    rendered = leased.answer(render)
    if _gone(request):
        await serving.give_back(ask.queue, leased.messages)
        raise ClientGone("the client closed the connection")
    return rendered


async def _unless_gone(
    request: Watched, departures: Departures, receive: Coroutine[Any, Any, list[Message]]
) -> list[Message]:
    """Run a waiting ``receive`` in this handler's task; cancel it when the client
    disconnects first.

    No task of its own: the answer goes out the moment the receive is woken,
    not a turn of the event loop later. A receive cancelled while it leased
    leaves nothing to give back: what its walk took lapses. What a receive done
    before the client was seen gone leased goes on to ``answer_for``, which gives
    it back when the answer cannot be written.
    """
    handler = asyncio.current_task()
    assert handler is not None  # a request's handler runs in a task
    departures.watch(request, handler)
    gone = False
    try:
        return await receive
    except asyncio.CancelledError:
        gone = departures.forget(handler)
        if not gone or handler.uncancel() > 0:
            raise  # cancelled for another reason (too), not only the client gone
        raise ClientGone("the client closed the connection during a long poll") from None
    finally:
        if not gone:
            departures.forget(handler)
