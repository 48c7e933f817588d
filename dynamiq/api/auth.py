"""Keys on the way in: every route's caller is found here, once, and held to the route's access.

``guarded`` wraps each route of a table (``routes.route_defs`` does it), so
that a refusal is rendered in that API's own shape (v1's, v2's, SQS's) by the
error handling around it.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Mapping

from aiohttp import web
from aiohttp.typedefs import Handler

from dynamiq.access.roles import ANYONE, Access, Principal
from dynamiq.api.context import Services, services_of
from dynamiq.errors import Forbidden

__all__ = ["PRINCIPAL", "admit_caller", "bearer", "caller", "cross_site", "guarded"]

PRINCIPAL = web.RequestKey("principal", Principal)
_KEYLESS = frozenset({Access.OPEN, Access.PEER})
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


def bearer(authorization: str) -> str | None:
    """Return the key of an ``Authorization: Bearer <key>`` header's value, or None."""
    scheme, _, token = authorization.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def guarded(handler: Handler, access: Access, api: str) -> Handler:
    """Return ``handler`` behind the door: the caller is found and must be allowed ``access``.

    ``api`` names the route's API: one the node serves without keys
    (``auth.v1``, ``auth.sqs``, ``auth.metrics`` set to ``open``) takes every
    caller as ``ANYONE``, as does every API when keys are off.
    """

    async def guard(request: web.Request) -> web.StreamResponse:
        principal = await admit_caller(
            services_of(request),
            access,
            api,
            request.method,
            request.headers,
            request.host or "",
            request.remote or "",
        )
        if principal is not None:
            request[PRINCIPAL] = principal
        return await handler(request)

    return guard


async def admit_caller(
    services: Services,
    access: Access,
    api: str,
    method: str,
    headers: Mapping[str, str],
    host: str,
    remote: str,
) -> Principal | None:
    """Return the caller of a request (``headers`` by lower-case name: a ``Host`` of
    ``host``, from ``remote``), allowed ``access`` to ``api``; None on a route open to
    all while keys are on.

    Raises:
        Forbidden: a page of another site, a name of the node it does not answer to,
            or a key that may not do this.
        Unauthorized: no key, or one the node does not know.
    """
    door = services.guard
    # A change, or a lease (v1 leases with GET: a page's <img> must not).
    changes = access is Access.CONSUME or method not in _SAFE
    if changes and cross_site(headers, host):
        raise Forbidden("requests from other sites' pages may not change anything here")
    if not door.enabled and services.hosts and not _named_well(host, services.hosts):
        raise Forbidden(f"this node is not called {_host(host)!r} (auth.hosts names the others)")
    if not door.enabled or api in services.keyless:
        return ANYONE
    if access in _KEYLESS:
        return None
    principal = await door.identify(bearer(headers.get("authorization", "")), remote)
    principal.require(access)
    return principal


def cross_site(headers: Mapping[str, str], host: str) -> bool:
    """Whether a browser says the request comes from another site's page.

    Browsers send ``Sec-Fetch-Site`` (and ``Origin`` on every POST, PUT, PATCH
    and DELETE); other clients send neither, and are not refused.
    """
    fetched = headers.get("sec-fetch-site")
    if fetched is not None:
        return fetched not in ("same-origin", "none")
    origin = headers.get("origin")
    if origin is None:
        return False
    return origin == "null" or origin.partition("://")[2].lower() != host.lower()


def _host(host: str) -> str:
    """The name a ``Host`` calls this node by, without the port."""
    host = host.lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def _named_well(host: str, hosts: frozenset[str]) -> bool:
    """Whether the request calls this node by an address or a name it answers to.

    An address cannot be rebound: only names are checked (a page's own name
    that the attacker points at this node's address is not among them).
    """
    name = _host(host)
    return name in hosts or _is_address(name)


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
