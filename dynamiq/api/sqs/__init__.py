"""The SQS-compatible endpoint: ``POST /`` as AWS SDKs call it, on the node's own port.

The AWS JSON 1.0 protocol: ``X-Amz-Target: AmazonSQS.<Action>`` names the
action, the body holds its parameters, and the answer is JSON with
``Content-Type: application/x-amz-json-1.0``; errors carry SQS's shape in
``__type`` and its legacy code in ``x-amzn-query-error``. Each action is one
function of ``queues`` or ``messages``, found here by name.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web

from dynamiq.api.context import SERVICES
from dynamiq.api.errors import error_response
from dynamiq.api.routes import Route, route_defs
from dynamiq.api.sqs.call import Call
from dynamiq.api.sqs.errors import SqsError, sqs_error
from dynamiq.api.sqs.messages import MESSAGE_ACTIONS
from dynamiq.api.sqs.params import Params
from dynamiq.api.sqs.queues import QUEUE_ACTIONS
from dynamiq.errors import DynamiqError

__all__ = ["ACTIONS", "ROUTES", "routes"]

TARGET_PREFIX = "AmazonSQS."
JSON_TYPE = "application/x-amz-json-1.0"
ACTIONS: dict[str, Callable[[Call], Awaitable[dict[str, Any]]]] = {
    **QUEUE_ACTIONS,
    **MESSAGE_ACTIONS,
}
_encode = msgspec.json.Encoder().encode


async def endpoint(request: web.Request) -> web.StreamResponse:
    """Run the action ``X-Amz-Target`` names; answer as SQS does, errors included."""
    try:
        target = request.headers.get("X-Amz-Target", "")
        action = ACTIONS.get(target.removeprefix(TARGET_PREFIX))
        if not target.startswith(TARGET_PREFIX) or action is None:
            raise SqsError("InvalidAction", f"The action {target or '(none)'} is not valid.")
        services = request.config_dict[SERVICES]
        base = f"{request.scheme}://{request.host}"
        call = Call(services.node, services.sqs, base, Params(await _parameters(request)))
        return _answer(await action(call))
    except web.HTTPRequestEntityTooLarge:
        error: DynamiqError = SqsError("BatchRequestTooLong", "The request body is too large.")
    except DynamiqError as exc:
        error = exc
    return error_response(request, _render, sqs_error(error))


async def _parameters(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        data = json.loads(raw) if raw else {}
    except (ValueError, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict):
        raise SqsError("SerializationException", "The request body is not a JSON object.")
    return data


def _answer(body: dict[str, Any]) -> web.Response:
    return web.Response(
        body=_encode(body),
        headers={"Content-Type": JSON_TYPE, "x-amzn-RequestId": str(uuid.uuid4())},
    )


def _render(error: DynamiqError) -> web.Response:
    sqs = sqs_error(error)
    headers = {
        "Content-Type": JSON_TYPE,
        "x-amzn-RequestId": str(uuid.uuid4()),
        "x-amzn-query-error": f"{sqs.query_code};{'Sender' if sqs.sender else 'Receiver'}",
    }
    if sqs.retry_after is not None:
        headers["Retry-After"] = str(sqs.retry_after)
    body = {"__type": f"com.amazonaws.sqs#{sqs.shape}", "message": sqs.message}
    return web.Response(status=sqs.status, body=_encode(body), headers=headers)


ROUTES: tuple[Route, ...] = (Route("POST", "/", endpoint, summary="SQS (AWS JSON 1.0)"),)


def routes() -> list[web.RouteDef]:
    """Return the SQS route."""
    return route_defs(ROUTES)
