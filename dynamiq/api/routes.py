"""Declared routes: one row per route, from which aiohttp's table and the OpenAPI document come."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from dynamiq.access.roles import Access, Principal
from dynamiq.api.auth import caller, guarded
from dynamiq.api.context import services_of
from dynamiq.api.limits import admitted
from dynamiq.errors import DynamiqError, NotFound
from dynamiq.service.node import Node

__all__ = [
    "Link",
    "Param",
    "Route",
    "node",
    "queue_name",
    "queue_param",
    "route_defs",
    "topic_name",
    "who",
]


@dataclass(frozen=True, slots=True, eq=False)
class Param:
    """A query parameter, as the OpenAPI document describes it."""

    name: str
    schema: dict[str, Any]
    at_most_batch: bool = False  # its maximum is the node's ``limits.maxbatch``


@dataclass(frozen=True, slots=True, eq=False)
class Link:
    """What a client may do next with a route's answer: call ``target`` with these
    path parameters and body, as OpenAPI runtime expressions (``$request.path.queue``,
    ``$response.body#/ids/0``). The OpenAPI document declares them as links, which
    generated clients and stateful fuzzers follow."""

    target: Handler
    parameters: Mapping[str, str] = field(default_factory=dict)
    body: Any = None  # None: the target's body is the caller's own


@dataclass(frozen=True, slots=True, eq=False)
class Route:
    """One route: method, path, handler, and what the OpenAPI document says of it."""

    method: str
    path: str
    handler: Handler
    summary: str = ""
    request: type | None = None  # the JSON body's struct
    response: type | None = None  # the success body's struct; None: ``{"deleted": true}``
    status: int = 200
    body_required: bool = True
    query: tuple[Param, ...] = field(default=())
    access: Access = Access.ADMIN  # what the caller's key must allow
    links: tuple[Link, ...] = ()  # from its success answer to what may follow
    needs_keys: bool = False  # served for a node with keys only (404 and undocumented else)


# An API's answer to a request refused before its handler ran (its own error shape).
Refusal = Callable[[web.Request, DynamiqError], web.StreamResponse]


def route_defs(
    table: Sequence[Route], api: str = "v2", refusal: Refusal | None = None
) -> list[web.RouteDef]:
    """Return aiohttp's route definitions for ``table``, each behind the door
    (``api``: which API the table is, for the APIs a node may serve without keys), then
    within the limits on request bodies (``api.limits.admitted``).

    An API with an error shape of its own answers what the door or the limits
    refuse with ``refusal``; the others leave it to the error middleware.
    """
    handlers = [guarded(_limited(r), r.access, api) for r in table]
    if refusal is not None:
        handlers = [_refusing(handler, refusal) for handler in handlers]
    return [web.route(r.method, r.path, h) for r, h in zip(table, handlers, strict=True)]


def _refusing(handler: Handler, refusal: Refusal) -> Handler:
    async def refusing(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except DynamiqError as exc:
            return refusal(request, exc)

    return refusing


def _limited(route: Route) -> Handler:
    """The route's handler within the limits on bodies; members' own requests (small,
    and heartbeats among them) never wait behind clients' bodies."""
    handler = _keyed(route.handler) if route.needs_keys else route.handler
    return handler if route.access is Access.PEER else admitted(handler)


def _keyed(handler: Handler) -> Handler:
    """``handler`` where the node needs keys; a 404 where it does not."""

    async def keyed(request: web.Request) -> web.StreamResponse:
        if not services_of(request).guard.enabled:
            raise NotFound("keys are off on this node (auth.enabled)")
        return await handler(request)

    return keyed


def who(request: web.Request) -> Principal:
    """Return the caller of a route that names queues or topics (never an open one)."""
    principal = caller(request)
    assert principal is not None, "a route open to all has no caller"
    return principal


def queue_name(request: web.Request, key: str = "queue") -> str:
    """Return the full name of the queue the path names, as the caller knows it."""
    return who(request).name_of(request.match_info[key])


def topic_name(request: web.Request) -> str:
    """Return the full name of the topic the path names, as the caller knows it."""
    return who(request).name_of(request.match_info["topic"])


def node(request: web.Request) -> Node:
    """Return the node serving ``request`` (from the application or a parent of it)."""
    return services_of(request).node


def queue_param(request: web.Request) -> str:
    """Return the ``{queue}`` of the path once the queue is known to exist (404 otherwise).

    Checked before the body is read, so that a request to a missing queue is
    a 404 whatever its body.
    """
    name = queue_name(request)
    node(request).require_queue(name)
    return name
