"""Request metrics and the Prometheus scrape endpoint."""

from __future__ import annotations

import time

from aiohttp import web
from aiohttp.typedefs import Handler

from dynamiq.access.roles import Access
from dynamiq.api.context import services_of
from dynamiq.api.routes import Route, route_defs
from dynamiq.metrics.prometheus import summed

__all__ = ["metrics_middleware", "routes"]

CONTENT_TYPE = "text/plain; version=0.0.4"


@web.middleware
async def metrics_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Time every request and count its answer by route template and status."""
    started = time.perf_counter()
    response = await handler(request)
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    services_of(request).metrics.request(
        route, request.method, response.status, time.perf_counter() - started
    )
    return response


def routes() -> list[web.RouteDef]:
    """Return the observability routes (served without keys when ``auth.metrics = open``)."""
    return route_defs((Route("GET", "/metrics", scrape, access=Access.MONITOR),), api="metrics")


async def scrape(request: web.Request) -> web.Response:
    """Serve this node's metrics in the Prometheus text format (its workers' summed)."""
    services = services_of(request)
    await services.read_levels()  # depths are read for a scrape, not every second
    body = services.render_metrics()
    others = await services.node.siblings_metrics()
    if others:
        body = summed(body, others)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE + "; charset=utf-8"})
