"""Declared routes: one row per route, from which aiohttp's table and the OpenAPI document come."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from dynamiq.api.context import SERVICES
from dynamiq.service.node import Node

__all__ = ["Param", "Route", "node", "queue_param", "route_defs"]


@dataclass(frozen=True, slots=True, eq=False)
class Param:
    """A query parameter, as the OpenAPI document describes it."""

    name: str
    schema: dict[str, Any]
    at_most_batch: bool = False  # its maximum is the node's ``limits.maxbatch``


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


def route_defs(table: Sequence[Route]) -> list[web.RouteDef]:
    """Return aiohttp's route definitions for ``table``."""
    return [web.route(r.method, r.path, r.handler) for r in table]


def node(request: web.Request) -> Node:
    """Return the node serving ``request`` (from the application or a parent of it)."""
    return request.config_dict[SERVICES].node


def queue_param(request: web.Request) -> str:
    """Return the ``{queue}`` of the path once the queue is known to exist (404 otherwise).

    Checked before the body is read, so that a request to a missing queue is
    a 404 whatever its body.
    """
    name = request.match_info["queue"]
    node(request).require_queue(name)
    return name
