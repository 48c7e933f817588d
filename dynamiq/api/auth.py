"""Keys on the way in: every route's caller is found here, once, and held to the route's access.

``guarded`` wraps each route of a table (``routes.route_defs`` does it), so
that a refusal is rendered in that API's own shape (v1's, v2's, SQS's) by the
error handling around it.
"""

from __future__ import annotations

import functools
import ipaddress

from aiohttp import web
from aiohttp.typedefs import Handler

from dynamiq.access.roles import ANYONE, Access, Principal
from dynamiq.api.context import services_of
from dynamiq.errors import Forbidden

__all__ = ["PRINCIPAL", "bearer", "caller", "guarded"]

PRINCIPAL = web.RequestKey("principal", Principal)
_KEYLESS = frozenset({Access.OPEN, Access.PEER})
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


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

    changes = access is Access.CONSUME  # v1 leases with GET: a page's <img> must not

    async def guard(request: web.Request) -> web.StreamResponse:
        services = services_of(request)
        door = services.guard
        if (changes or request.method not in _SAFE) and _cross_site(request):
            raise Forbidden("requests from other sites' pages may not change anything here")
        if not door.enabled and services.hosts and not _named_well(request, services.hosts):
            raise Forbidden(
                f"this node is not called {_host(request)!r} (auth.hosts names the others)"
            )
        if not door.enabled or api in services.keyless:
            request[PRINCIPAL] = ANYONE
        elif access not in _KEYLESS:
            principal = await door.identify(bearer(request), request.remote or "")
            principal.require(access)
            request[PRINCIPAL] = principal
        return await handler(request)

    return guard


def _cross_site(request: web.Request) -> bool:
    """Whether a browser says the request comes from another site's page.

    Browsers send ``Sec-Fetch-Site`` (and ``Origin`` on every POST, PUT, PATCH
    and DELETE); other clients send neither, and are not refused.
    """
    fetched = request.headers.get("Sec-Fetch-Site")
    if fetched is not None:
        return fetched not in ("same-origin", "none")
    origin = request.headers.get("Origin")
    if origin is None:
        return False
    return origin == "null" or origin.partition("://")[2].lower() != (request.host or "").lower()


def _host(request: web.Request) -> str:
    """The name the request calls this node by, without the port."""
    host = (request.host or "").lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def _named_well(request: web.Request, hosts: frozenset[str]) -> bool:
    """Whether the request calls this node by an address or a name it answers to.

    An address cannot be rebound: only names are checked (a page's own name
    that the attacker points at this node's address is not among them).
    """
    host = _host(request)
    return host in hosts or _is_address(host)


@functools.lru_cache(maxsize=256)
def _is_address(host: str) -> bool:
    """Whether ``host`` is an IP address (and not a name); asked on every request."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def caller(request: web.Request) -> Principal | None:
    """Return who is calling: None on a route open to all while keys are on."""
    return request.get(PRINCIPAL)
