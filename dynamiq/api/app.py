"""The aiohttp application: every API's route table and the middleware, in one place."""

from __future__ import annotations

from aiohttp import web

from dynamiq.api import console, internal, observe, v1
from dynamiq.api.aws import endpoint as aws
from dynamiq.api.context import SERVICES, Services
from dynamiq.api.delivery import DEPARTURES, Departures
from dynamiq.api.errors import error_middleware, render_v2
from dynamiq.api.v2 import routes as v2

__all__ = ["build_app"]


def build_app(services: Services, max_body_bytes: int) -> web.Application:
    """Return the HTTP application: ``/v1`` (its own error shape), ``/v2``, SQS's
    ``POST /`` (its own too) and the rest."""
    app = web.Application(
        # The metrics middleware sees every answer, errors rendered included.
        middlewares=[observe.metrics_middleware, error_middleware(render_v2)],
        client_max_size=max_body_bytes,
    )
    app[SERVICES] = services
    app[DEPARTURES] = Departures()
    app.add_subapp("/v1", v1.application())
    app.add_routes(v2.routes())
    app.add_routes(internal.routes())
    app.add_routes(observe.routes())
    app.add_routes(console.routes())
    app.add_routes(aws.routes())
    return app
