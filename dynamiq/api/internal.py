"""Routes nodes call on each other (``/internal/v1``, msgpack, members only).

A request without the cluster's peer token gets 403; on a node without
gossip every internal route is 403.
"""

from __future__ import annotations

import hmac
from typing import TypeVar

import msgspec
from aiohttp import web

from dynamiq.api.context import SERVICES, Services
from dynamiq.cluster.wire import (
    PEER_HEADER,
    Handoff,
    HandoffLeases,
    Leave,
    PeerIds,
    PeerMessages,
    PeerReceive,
    PeerStats,
    PeerVisibility,
    QueueNames,
)
from dynamiq.errors import BadRequest, Forbidden

__all__ = ["routes"]

T = TypeVar("T")

_encode = msgspec.msgpack.Encoder().encode


def routes() -> list[web.RouteDef]:
    """Return the internal route table."""
    return [
        web.post("/internal/v1/queues/{queue}/receive", receive),
        web.post("/internal/v1/queues/{queue}/visibility", change_visibility),
        web.post("/internal/v1/queues/{queue}/release", release),
        web.post("/internal/v1/stats", stats),
        web.post("/internal/v1/handoff", handoff),
        web.post("/internal/v1/sync", sync),
        web.post("/internal/v1/leave", leave),
    ]


async def _read(request: web.Request, kind: type[T]) -> tuple[Services, T]:
    svc = request.app[SERVICES]
    token = request.headers.get(PEER_HEADER, "")
    if svc.peer_token is None or not hmac.compare_digest(token, svc.peer_token):
        raise Forbidden("internal routes are for cluster members")
    try:
        return svc, msgspec.msgpack.decode(await request.read(), type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise BadRequest(f"bad internal request: {exc}") from None


def _msgpack(body: object) -> web.Response:
    return web.Response(body=_encode(body), content_type="application/msgpack")


async def receive(request: web.Request) -> web.Response:
    """Lease from this node's own slice only, without waiting."""
    svc, body = await _read(request, PeerReceive)
    got = await svc.queues.receive(
        request.match_info["queue"], body.max_messages, body.visibility_timeout
    )
    return _msgpack(PeerMessages([(m.id, m.body, m.published_ms) for m in got]))


async def change_visibility(request: web.Request) -> web.Response:
    """Change leases held here."""
    svc, body = await _read(request, PeerVisibility)
    name = request.match_info["queue"]
    return _msgpack(PeerIds(svc.queues.change_visibility(name, body.ids, body.seconds)))


async def release(request: web.Request) -> web.Response:
    """Messages were deleted through another node: end the leases held here."""
    svc, body = await _read(request, PeerIds)
    svc.queues.release(request.match_info["queue"], body.ids)
    return web.Response(status=204)


async def stats(request: web.Request) -> web.Response:
    """Return what only this node knows of each queue: leases, rates, partitions."""
    svc, body = await _read(request, QueueNames)
    return _msgpack(PeerStats(svc.queues.local_stats(body.queues)))


async def handoff(request: web.Request) -> web.Response:
    """Hand a range over to the member that now owns it: 409 while still serving part of it."""
    svc, body = await _read(request, Handoff)
    leases = await svc.coordinator.hand_over(body.lo, body.hi)
    if leases is None:
        return web.Response(status=409)
    return _msgpack(HandoffLeases(leases))


async def sync(request: web.Request) -> web.Response:
    """A peer changed the catalog: reload it now."""
    svc, _ = await _read(request, type(None))
    svc.coordinator.catalog_changed()
    return web.Response(status=204)


async def leave(request: web.Request) -> web.Response:
    """A peer is leaving: recompute the slices without it."""
    svc, body = await _read(request, Leave)
    svc.membership.depart(body.name, body.boot)
    return web.Response(status=204)
