"""Leasing messages to a client that may go away: a receive stops with its connection.

A long poll whose client disconnected would otherwise lease the next
published message to nobody, and keep it in flight for a whole visibility
timeout. Here the wait stops when the connection closes, and messages whose
answer could not be written are given back at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from aiohttp import web

from dynamiq.api.routes import node
from dynamiq.models import Message, ReceiveRequest

__all__ = ["DEPARTURES", "ClientGone", "Departures", "deliver"]

# How often the clients of waiting receives are looked at.
CONNECTION_CHECK_SECONDS = 0.2


class ClientGone(ConnectionResetError):
    """The client closed its connection before its answer was written."""


class Departures:
    """The clients of waiting receives, all looked at by one timer.

    A timer per receive costs the event loop in proportion to the receives
    waiting: 2,000 of them made 10,000 wake-ups a second, and a request
    arriving meanwhile waited its turn behind them. One look over every
    connection, each a flag read, costs microseconds.
    """

    def __init__(self) -> None:
        self._watched: dict[asyncio.Future[None], web.Request] = {}  # gone: whose
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, request: web.Request) -> asyncio.Future[None]:
        """Return a future done once ``request``'s client has gone (``forget`` it after)."""
        gone = asyncio.get_running_loop().create_future()
        self._watched[gone] = request
        if self._timer is None:
            self._arm()
        return gone

    def forget(self, gone: asyncio.Future[None]) -> None:
        self._watched.pop(gone, None)

    def _look(self) -> None:
        self._timer = None
        for gone, request in list(self._watched.items()):
            if _gone(request):
                del self._watched[gone]
                gone.set_result(None)
        if self._watched:
            self._arm()

    def _arm(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(CONNECTION_CHECK_SECONDS, self._look)


DEPARTURES = web.AppKey("departures", Departures)


def _gone(request: web.Request) -> bool:
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
    serving.check_receive(ask)  # a refused request leases nothing
    epoch = serving.lease_epoch()
    # What is visible now is taken at once; only a receive that has to wait
    # runs as a task watched for its client going away.
    messages = await serving.receive(ask.at_once())
    if not messages and ask.wait_seconds > 0:
        waiting = asyncio.ensure_future(serving.receive(ask))
        messages = await _unless_gone(request, waiting, ask.queue)
    response = render(messages)
    if messages and not serving.leases_hold(epoch):
        # Looked at last, just before the answer is written: a process paused after
        # leasing must not hand out what others may have leased meanwhile.
        response = render([])
    try:
        if _gone(request):
            raise ClientGone("the client closed the connection")
        await response.prepare(request)
        await response.write_eof()
    except ConnectionResetError:
        await serving.give_back(ask.queue, messages)
        raise ClientGone("the client closed the connection") from None
    return response


async def _unless_gone(
    request: web.Request, task: asyncio.Future[list[Message]], queue: str
) -> list[Message]:
    """Wait for ``task``; cancel it when the client disconnects first."""
    departures = request.config_dict[DEPARTURES]
    gone = departures.watch(request)
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        task.cancel()
        leased: list[Message] = []
        with contextlib.suppress(asyncio.CancelledError):
            leased = await task  # it may have finished before the cancel
        await node(request).give_back(queue, leased)
        raise ClientGone("the client closed the connection during a long poll")
    finally:
        departures.forget(gone)
        if not task.done():  # this handler itself was cancelled
            task.cancel()
