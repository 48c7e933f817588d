"""Routes nodes call on each other (``/internal/v1``, msgpack, members only).

A request not signed by a member just now (``cluster.wire.PeerSigner``) gets
403; on a node without gossip every internal route is 403. A request from a
member of a release this one cannot speak with (``cluster.base.speaks_with``)
gets 409 ``PROTOCOL_MISMATCH``, and the refusal is logged once per member.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec
from aiohttp import web

from dynamiq.access.roles import Access
from dynamiq.api.context import services_of
from dynamiq.api.routes import Route, route_defs
from dynamiq.cluster import wire
from dynamiq.cluster.base import OLDEST_PROTOCOL, PROTOCOL, protocol_of, speaks_with
from dynamiq.errors import BadRequest, Forbidden, ProtocolMismatch
from dynamiq.service.node import Node

__all__ = ["ROUTES", "routes"]

T = TypeVar("T")
log = logging.getLogger("dynamiq.api")

_encode = msgspec.msgpack.Encoder().encode


async def _read(request: web.Request, kind: type[T]) -> tuple[Node, T]:
    svc = services_of(request)
    if svc.peers is None:
        raise Forbidden("internal routes are for cluster members (this node does not gossip)")
    theirs = protocol_of(request.headers.get(wire.PROTOCOL_HEADER))
    if not speaks_with(theirs):
        _refuse_once(request.remote or "?", theirs)
        raise ProtocolMismatch(
            f"this node speaks cluster protocols {OLDEST_PROTOCOL} to {PROTOCOL}, the caller "
            f"{theirs}: restart the cluster on one release"
        )
    body = await request.read()
    refused = svc.peers.verify(request.headers.get(wire.PEER_HEADER, ""), request.path, body)
    if refused is not None:
        raise Forbidden(refused)
    try:
        return svc.node, msgspec.msgpack.decode(body, type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise BadRequest(f"bad internal request: {exc}") from None


@functools.lru_cache(maxsize=64)
def _refuse_once(caller: str, theirs: int) -> None:
    """Log, once per caller and protocol, that its peer calls are refused."""
    log.warning(
        "refusing peer calls from %s: it speaks cluster protocol %d, this node %d to %d "
        "(a release too far apart: restart the cluster on one release)",
        caller,
        theirs,
        OLDEST_PROTOCOL,
        PROTOCOL,
    )


def _msgpack(body: object) -> web.Response:
    return web.Response(body=_encode(body), content_type="application/msgpack")


async def receive(request: web.Request) -> web.Response:
    """Lease from this node's own slice only, without waiting."""
    here, body = await _read(request, wire.PeerReceive)
    leased = await here.receive_here(
        request.match_info["queue"], body.max_messages, body.visibility_timeout, body.waiter
    )
    return leased.answer(lambda got: _msgpack(wire.PeerMessages(got)))


async def change_visibility(request: web.Request) -> web.Response:
    """Change leases held here."""
    here, body = await _read(request, wire.PeerVisibility)
    name = request.match_info["queue"]
    changed = await here.answers.change_visibility_here(name, body.ids, body.seconds)
    return _msgpack(wire.PeerIds(changed))


async def deliveries(request: web.Request) -> web.Response:
    """Per id, the receive count this node last delivered it with (0: never)."""
    here, body = await _read(request, wire.PeerIds)
    counts = here.answers.deliveries_here(request.match_info["queue"], body.ids)
    return _msgpack(wire.PeerCounts(counts))


def _notice(
    kind: type[T], act: Callable[[Node, str, T], Awaitable[None] | None], what: str
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A route a peer tells this node something through: ``act`` on it (``queue`` is the
    path's, "" where it names none), then answer 204."""

    async def told(request: web.Request) -> web.Response:
        here, body = await _read(request, kind)
        done = act(here, request.match_info.get("queue", ""), body)
        if done is not None:
            await done
        return web.Response(status=204)

    told.__doc__ = what
    return told


release = _notice(
    wire.PeerIds,
    lambda here, queue, body: here.answers.release(queue, body.ids),
    "Messages were deleted through another node: end the leases held here.",
)
published = _notice(
    wire.PeerIds,
    lambda here, queue, body: here.answers.published_here(queue, body.ids),
    "Messages were stored in this node's slice through another node.",
)
news = _notice(
    wire.News,
    lambda here, queue, body: here.answers.news(queue, body.name),
    "A peer stored messages of a queue this member waits on, in its own slice.",
)
heartbeat = _notice(
    wire.Heartbeat,
    lambda here, _, body: here.answers.heard(body.name),
    "A member's heartbeat: answered at once (the answer completes its round trip).",
)
sync = _notice(
    wire.CatalogChange | None,  # type: ignore[arg-type]
    lambda here, _, change: here.answers.catalog_changed(change),
    "A peer changed the catalog: read again what it wrote (all of it, when it does not "
    "say), then answer.",
)
leave = _notice(
    wire.Leave,
    lambda here, _, body: here.membership.depart(body.name, body.boot),
    "A peer is leaving: recompute the slices without it.",
)


async def stats(request: web.Request) -> web.Response:
    """Return what only this node knows of each queue: leases, rates, partitions."""
    here, body = await _read(request, wire.QueueNames)
    return _msgpack(wire.PeerStats(here.answers.local_stats(body.queues)))


async def serving(request: web.Request) -> web.Response:
    """Return the ids this member serves now (a worker of the same node asks)."""
    here, _ = await _read(request, type(None))
    return _msgpack(wire.PeerServing(list(here.answers.serving() or ())))


async def metrics(request: web.Request) -> web.Response:
    """Return this member's own metrics (a worker of the same node sums them)."""
    await _read(request, type(None))
    return _msgpack(wire.PeerMetrics(services_of(request).render_metrics()))


async def handoff(request: web.Request) -> web.Response:
    """Hand a range over to the member that now owns it: 409 while still serving part of it."""
    here, body = await _read(request, wire.Handoff)
    leases = await here.answers.hand_over(body.lo, body.hi, body.name, body.gone)
    if leases is None:
        return web.Response(status=409)
    return _msgpack(wire.HandoffLeases(leases))


P = "/internal/v1"
ROUTES: tuple[Route, ...] = (
    Route("POST", f"{P}/queues/{{queue}}/receive", receive, access=Access.PEER),
    Route("POST", f"{P}/queues/{{queue}}/visibility", change_visibility, access=Access.PEER),
    Route("POST", f"{P}/queues/{{queue}}/deliveries", deliveries, access=Access.PEER),
    Route("POST", f"{P}/queues/{{queue}}/release", release, access=Access.PEER),
    Route("POST", f"{P}/queues/{{queue}}/published", published, access=Access.PEER),
    Route("POST", f"{P}/queues/{{queue}}/news", news, access=Access.PEER),
    Route("POST", f"{P}/stats", stats, access=Access.PEER),
    Route("POST", f"{P}/serving", serving, access=Access.PEER),
    Route("POST", f"{P}/metrics", metrics, access=Access.PEER),
    Route("POST", f"{P}/handoff", handoff, access=Access.PEER),
    Route("POST", f"{P}/heartbeat", heartbeat, access=Access.PEER),
    Route("POST", f"{P}/sync", sync, access=Access.PEER),
    Route("POST", f"{P}/leave", leave, access=Access.PEER),
)


def routes() -> list[web.RouteDef]:
    """Return the internal route table."""
    return route_defs(ROUTES)
