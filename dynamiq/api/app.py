"""The aiohttp application: the whole route table and the middleware, in one place."""

from __future__ import annotations

from aiohttp import web

from dynamiq.api import console, internal, observe, v1, v2
from dynamiq.api.context import SERVICES, Services
from dynamiq.api.errors import error_middleware

__all__ = ["build_app"]


def build_app(services: Services) -> web.Application:
    """Return the HTTP application serving ``/v1`` and ``/v2`` from ``services``."""
    app = web.Application(
        # The metrics middleware sees every answer, errors rendered included.
        middlewares=[observe.metrics_middleware, error_middleware],
        client_max_size=services.limits.maxbodybytes,
    )
    app[SERVICES] = services
    app.add_routes(v1.routes())
    app.add_routes(v2.routes())
    app.add_routes(internal.routes())
    app.add_routes(observe.routes())
    app.add_routes(console.routes())
    return app
