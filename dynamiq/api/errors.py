"""The one place where errors become HTTP responses."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from dynamiq.api.bodies import json_response
from dynamiq.api.context import SERVICES
from dynamiq.errors import BackendUnavailable, DynamiqError

__all__ = ["error_middleware"]

log = logging.getLogger("dynamiq.api")

# v1 clients were written against the original's statuses.
_V1_STATUS = {"QUEUE_EXISTS": 422, "TOPIC_EXISTS": 422}

_HTTP_CODES = {
    400: "BAD_REQUEST",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    413: "PAYLOAD_TOO_LARGE",
}


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Render every error, ours or aiohttp's, with the same envelope."""
    try:
        return await handler(request)
    except DynamiqError as exc:
        return render(request, exc.status, exc.code, exc.message, exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, "HTTP_ERROR")
        return render(request, exc.status, code, exc.reason or code, None)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return render(request, 500, "INTERNAL", "internal error; see the node's log", None)


def render(
    request: web.Request, status: int, code: str, message: str, exc: DynamiqError | None
) -> web.Response:
    """Return the error response: ``{"error": CODE, "message": ...}`` on v2.

    On v1 the original's shape ``{"error": message}`` is kept (with the code
    beside it) and its statuses where they differ.
    """
    if request.path.startswith("/v1/"):
        response = json_response(
            {"error": message, "code": code}, status=_V1_STATUS.get(code, status)
        )
    else:
        response = json_response({"error": code, "message": message}, status=status)
    if isinstance(exc, BackendUnavailable):
        response.headers["Retry-After"] = str(exc.retry_after)
    request.app[SERVICES].metrics.error(code)
    return response
