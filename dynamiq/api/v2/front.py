"""The v2 routes the front end serves itself: publish, receive and delete, the hot ones.

Each does what its route under aiohttp does, in the same order and with the
same code: the caller found and held to the route's access (``auth``), the
body held within the node's limits (``limits``, ``intake``), the handler's
own work (``v2_handlers``), an error rendered in v2's shape and counted
(``errors``), the request counted under its route (``observe``). Its access
and its path's template come from v2's table of routes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from dynamiq.access.roles import Principal
from dynamiq.api import schemas as s
from dynamiq.api.auth import admit_caller
from dynamiq.api.bodies import JSON, check_media, decode_json
from dynamiq.api.context import Services
from dynamiq.api.delivery import Departures, answer_for, lease_for
from dynamiq.api.errors import CLIENT_GONE, error_headers, error_of, v2_body
from dynamiq.api.front.connection import Connection, Reply, Route
from dynamiq.api.front.http1 import Head
from dynamiq.api.limits import late_body
from dynamiq.api.routes import Route as RouteRow
from dynamiq.api.v2 import handlers, routes
from dynamiq.errors import DynamiqError

__all__ = ["V2Front"]

# A route's own work: the queue's name as the path gives it, the caller, the body, the request.
Work = Callable[[str, Principal, bytes, Head, Connection], Awaitable[Reply]]


@dataclass(frozen=True, slots=True)
class _Served:
    work: Work
    route: RouteRow  # its row of v2's table (its access; its path, which metrics count under)


class V2Front:
    """Publish, receive and delete on v2, served by the front end for ``services``."""

    def __init__(self, services: Services, departures: Departures) -> None:
        self._services = services
        self._departures = departures
        table = {route.handler: route for route in routes.ROUTES}
        self._served = {
            action: _Served(work, table[handler])
            for action, handler, work in (
                ("messages", handlers.publish, self._publish),
                ("receive", handlers.receive, self._receive),
                ("delete", handlers.delete, self._delete),
            )
        }

    def lookup(self, head: Head) -> Route | None:
        """The route of ``head``, when it is one of these."""
        if head.method != "POST":
            return None
        parts = head.path.split("/")
        if len(parts) != 5 or parts[1] != "v2" or parts[2] != "queues" or not parts[3]:
            return None
        served = self._served.get(parts[4])
        return None if served is None else functools.partial(self._serve, served, parts[3])

    async def _serve(
        self, served: _Served, raw_name: str, head: Head, connection: Connection
    ) -> Reply | None:
        """Answer the request as the error and metrics middleware would around it."""
        started = time.perf_counter()
        metrics, template = self._services.metrics, served.route.path
        try:
            reply = await self._admitted(served, raw_name, head, connection)
        except Exception as exc:
            error = error_of(exc, head.method, head.path, metrics)
            if error is None:
                metrics.request(template, head.method, CLIENT_GONE, time.perf_counter() - started)
                return None
            reply = _refused(self._services, error)
        metrics.request(template, head.method, reply.status, time.perf_counter() - started)
        return reply

    async def _admitted(
        self, served: _Served, raw_name: str, head: Head, connection: Connection
    ) -> Reply:
        """The route's work for its caller, its body held within the node's limits."""
        services = self._services
        route = served.route
        # The address matters to keys only: read it only then.
        remote = connection.remote if services.guard.enabled else ""
        caller = await admit_caller(
            services, route.access, "v2", head.method, head.headers, head.headers["host"], remote
        )
        assert caller is not None, "these routes are never open to all"
        size = head.length
        if not size:
            return await served.work(raw_name, caller, b"", head, connection)
        await services.intake.take(size)
        try:
            seconds = services.node.limits.bodytimeout
            try:
                body = await connection.body(head, seconds)
            except TimeoutError:
                raise late_body(seconds) from None
            return await served.work(raw_name, caller, body, head, connection)
        finally:
            services.intake.give(size)

    # -- the routes' own work ------------------------------------------------

    async def _publish(
        self, raw_name: str, caller: Principal, body: bytes, head: Head, _: Connection
    ) -> Reply:
        here = self._services.node
        name = self._queue(raw_name, caller, body, head)
        batch = handlers.outgoing_batch(decode_json(body, s.PublishRequest))
        return Reply(200, JSON.encode(handlers.published(await here.publish(name, batch))))

    async def _receive(
        self, raw_name: str, caller: Principal, body: bytes, head: Head, connection: Connection
    ) -> Reply:
        here = self._services.node
        name = self._queue(raw_name, caller, body, head)
        asked = decode_json(body, s.ReceiveRequest, optional=True)
        ask, render = handlers.receive_ask(here, name, asked, caller)
        leased = await lease_for(connection, self._departures, here, ask)
        return Reply(200, JSON.encode(await answer_for(connection, here, ask, leased, render)))

    async def _delete(
        self, raw_name: str, caller: Principal, body: bytes, head: Head, _: Connection
    ) -> Reply:
        here = self._services.node
        name = self._queue(raw_name, caller, body, head)
        asked = decode_json(body, s.DeleteRequest)
        return Reply(200, JSON.encode(await handlers.deleted(here, name, asked)))

    def _queue(self, raw_name: str, caller: Principal, body: bytes, head: Head) -> str:
        """The queue the path names, known to exist, and a body that is JSON: as
        ``routes.queue_param`` and ``bodies.read_json`` check them, in that order."""
        name = caller.name_of(raw_name)
        self._services.node.require_queue(name)
        check_media(bool(body), head.mimetype)
        return name


def _refused(services: Services, error: DynamiqError) -> Reply:
    """An error's answer in v2's shape, counted."""
    services.metrics.error(error.code)
    return Reply(error.status, JSON.encode(v2_body(error)), error_headers(error))
