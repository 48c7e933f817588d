"""The one place where errors become HTTP responses; each API version brings its renderer.

Every error, ours or aiohttp's (404, 405, 413), reaches the renderer as one
of the ``errors`` tree. A client that went away is not a server error: it is
counted apart (status 499, as proxies do) and logged at debug level only.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from dynamiq.api.bodies import json_response
from dynamiq.api.context import services_of
from dynamiq.errors import (
    BadRequest,
    ClientError,
    DynamiqError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    RetryLater,
    ServerError,
    Unauthorized,
)
from dynamiq.metrics.base import Metrics

__all__ = [
    "CLIENT_GONE",
    "Renderer",
    "error_headers",
    "error_middleware",
    "error_of",
    "error_response",
    "render_v1",
    "render_v2",
    "v2_body",
]

log = logging.getLogger("dynamiq.api")

CLIENT_GONE = 499  # nobody reads it: the status the metrics count it under

# Turns an error into the response body and status of one API version.
Renderer = Callable[[DynamiqError], web.Response]


def render_v2(error: DynamiqError) -> web.Response:
    """Render ``{"error": CODE, "message": ...}`` with the error's status."""
    return json_response(v2_body(error), status=error.status)


def v2_body(error: DynamiqError) -> dict[str, str]:
    """The body of a v2 error: its code and its sentence."""
    return {"error": error.code, "message": error.message}


def error_headers(error: DynamiqError) -> tuple[tuple[str, str], ...]:
    """The headers an error's answer carries besides its body, whatever its API."""
    if isinstance(error, RetryLater):
        return (("Retry-After", str(error.retry_after)),)
    if isinstance(error, Unauthorized):
        return (("WWW-Authenticate", 'Bearer realm="dynamiq"'),)
    if isinstance(error, MethodNotAllowed):
        return (("Allow", ",".join(sorted(error.allowed))),)
    return ()


# v1 clients were written against the original's statuses.
_V1_STATUS = {"QUEUE_EXISTS": 422, "TOPIC_EXISTS": 422}


def render_v1(error: DynamiqError) -> web.Response:
    """Render the original's ``{"error": sentence}``, with the stable code beside it."""
    status = _V1_STATUS.get(error.code, error.status)
    return json_response({"error": error.message, "code": error.code}, status=status)


def _from_http(exc: web.HTTPException, method: str) -> DynamiqError:
    """Return aiohttp's routing and body-size refusals as errors of the tree."""
    if isinstance(exc, web.HTTPMethodNotAllowed):
        return MethodNotAllowed(method, frozenset(exc.allowed_methods))
    if exc.status == 404:
        return NotFound("no such route")
    if exc.status == 413:
        return PayloadTooLarge(exc.text or "the body is too large")
    if exc.status == 400:
        return BadRequest(exc.text or "bad request")
    error: DynamiqError = ClientError(exc.reason) if exc.status < 500 else ServerError(exc.reason)
    error.status = exc.status
    return error


def error_middleware(render: Renderer) -> Middleware:
    """Return a middleware that renders every error with ``render``."""

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            error = _from_http(exc, request.method)
        except Exception as exc:
            found = error_of(exc, request.method, request.path, services_of(request).metrics)
            if found is None:
                return web.Response(status=CLIENT_GONE)
            error = found
        return error_response(request, render, error)

    return errors


def error_of(exc: Exception, method: str, path: str, metrics: Metrics) -> DynamiqError | None:
    """The error a handler's exception is answered with: itself when it is one of
    ours, a logged 500 when it is not; None when the client went away (counted as
    ``CLIENT_GONE``, answered to nobody).

    Its frames are let go of: they hold the request and its body (a request keeps
    the exception its payload failed with: a cycle), freed now, not by a later GC.
    """
    if isinstance(exc, DynamiqError):
        _forget_frames(exc)
        return exc
    if isinstance(exc, ConnectionResetError):
        _forget_frames(exc)
        log.debug("client went away: %s %s", method, path)
        metrics.error("CLIENT_GONE")
        return None
    log.error("unhandled error in %s %s", method, path, exc_info=exc)
    _forget_frames(exc)
    return ServerError("internal error; see the node's log")


def _forget_frames(exc: BaseException) -> None:
    traceback.clear_frames(exc.__traceback__)
    exc.__traceback__ = None


def error_response(request: web.Request, render: Renderer, error: DynamiqError) -> web.Response:
    """Render ``error`` and count it (for an API whose handler renders its own errors)."""
    response = render(error)
    response.headers.update(error_headers(error))
    services_of(request).metrics.error(error.code)
    return response
