"""Keys on the way in: every route's caller is found here, once, and held to the route's access.

``guarded`` wraps each route of a table (``routes.route_defs`` does it), so
that a refusal is rendered in that API's own shape (v1's, v2's, SQS's) by the
error handling around it.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

from dynamiq.api.context import SERVICES
from dynamiq.service.access import ANYONE, Access, Principal

__all__ = ["PRINCIPAL", "bearer", "caller", "guarded"]

PRINCIPAL = web.RequestKey("principal", Principal)
_KEYLESS = frozenset({Access.OPEN, Access.PEER})


def bearer(request: web.Request) -> str | None:
    """Return the key of an ``Authorization: Bearer <key>`` header, or None."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def guarded(handler: Handler, access: Access, api: str) -> Handler:
    """Return ``handler`` behind the door: the caller is found and must be allowed ``access``.

    ``api`` names the route's API: one the node serves without keys
    (``auth.v1``, ``auth.sqs``, ``auth.metrics`` set to ``open``) takes every
    caller as ``ANYONE``, as does every API when keys are off.
    """

    async def guard(request: web.Request) -> web.StreamResponse:
        services = request.config_dict[SERVICES]
        door = services.guard
        if not door.enabled or api in services.keyless:
            request[PRINCIPAL] = ANYONE
        elif access not in _KEYLESS:
            principal = await door.identify(bearer(request), request.remote or "")
            principal.require(access)
            request[PRINCIPAL] = principal
        return await handler(request)

    return guard


def caller(request: web.Request) -> Principal | None:
    """Return who is calling: None on a route open to all while keys are on."""
    return request.get(PRINCIPAL)
