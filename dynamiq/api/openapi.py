"""The OpenAPI 3.1 document of the v2 API, built from its route table and the structs it uses.

The document is as strict as the server: a client generated from it, or a
fuzzer that follows it, sends only what the server accepts (ranges, name and
id patterns, base64 bodies, this node's limits).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import msgspec

from dynamiq import __version__
from dynamiq.access.keys import KEY_ID
from dynamiq.access.roles import Access
from dynamiq.api import schemas as s
from dynamiq.api.routes import Link, Param, Route
from dynamiq.config import LimitsSettings
from dynamiq.models import ID_PATTERN, NAME_PATTERN, TOPIC_NAME_PATTERN

__all__ = ["openapi_document"]

_REF = "#/components/schemas/{name}"

BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"

_PATH_PARAMS = {
    "queue": {"type": "string", "pattern": NAME_PATTERN.pattern},
    "topic": {"type": "string", "pattern": TOPIC_NAME_PATTERN.pattern},
    "id": {"type": "string", "pattern": ID_PATTERN},
    "key_id": {"type": "string", "pattern": f"^{KEY_ID.pattern}$"},
}

_ERRORS = {
    "400": "Malformed JSON",
    "404": "No such queue, topic or message",
    "408": "The body did not arrive within limits.bodytimeout",
    "409": "The name is taken, or the queue is another's dead-letter queue",
    "413": "Body larger than limits.maxbodybytes",
    "415": "A body whose Content-Type is not application/json",
    "422": "Invalid input (types, ranges, names, batch size)",
    "429": "Past the key's rate, too many wrong keys, or the queue is full; "
    "retry after Retry-After seconds",
    "503": "The store is unavailable, the node is overloaded or its disk is nearly full; "
    "retry after Retry-After seconds",
}
_KEY_ERRORS = {
    "401": "No key, or a wrong or revoked one",
    "403": "The key's role does not allow this, or the name is another application's",
}
# `Authorization: Bearer <key>`, for a node that needs keys (auth.enabled)
_SECURITY = {"securitySchemes": {"key": {"type": "http", "scheme": "bearer"}}}


def _ref(kind: type) -> dict[str, str]:
    return {"$ref": _REF.format(name=kind.__name__)}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


_DELETED = {
    "type": "object",
    "properties": {"deleted": {"type": "boolean"}},
    "required": ["deleted"],
}


def _query_schema(param: Param, limits: LimitsSettings) -> dict[str, Any]:
    if param.at_most_batch:
        return {**param.schema, "maximum": limits.maxbatch}
    return param.schema


def _link(link: Link) -> dict[str, Any]:
    declared: dict[str, Any] = {"operationId": link.target.__name__}
    if link.parameters:
        declared["parameters"] = dict(link.parameters)
    if link.body is not None:
        declared["requestBody"] = link.body
    return declared


def _operation(route: Route, limits: LimitsSettings, keyed: bool) -> dict[str, Any]:
    params = [
        {"name": name, "in": "path", "required": True, "schema": schema}
        for name, schema in _PATH_PARAMS.items()
        if "{" + name + "}" in route.path
    ]
    params += [
        {"name": p.name, "in": "query", "required": False, "schema": _query_schema(p, limits)}
        for p in route.query
    ]
    ok: dict[str, Any] = {
        "description": "OK",
        "content": _json(_ref(route.response) if route.response else _DELETED),
    }
    if route.links:
        ok["links"] = {link.target.__name__: _link(link) for link in route.links}
    responses: dict[str, Any] = {str(route.status): ok}
    guarded = keyed and route.access is not Access.OPEN
    for code, text in sorted({**_ERRORS, **(_KEY_ERRORS if guarded else {})}.items()):
        responses[code] = {"description": text, "content": _json(_ref(s.ErrorBody))}
    op: dict[str, Any] = {
        "operationId": route.handler.__name__,
        "summary": route.summary,
        "parameters": params,
        "responses": responses,
    }
    if guarded:
        op["security"] = [{"key": []}]
    if route.request is not None:
        op["requestBody"] = {"required": route.body_required, "content": _json(_ref(route.request))}
    return op


def _apply_limits(components: dict[str, Any], limits: LimitsSettings) -> None:
    """Write this node's limits and the base64 rule into the generated schemas."""
    props = {name: c.get("properties", {}) for name, c in components.items()}
    props["PublishRequest"]["messages"]["maxItems"] = limits.maxbatch
    for name in ("DeleteRequest", "VisibilityRequest"):
        props[name]["ids"]["maxItems"] = limits.maxbatch
        props[name]["ids"]["items"]["pattern"] = ID_PATTERN
    props["ReceiveRequest"]["max_messages"]["maximum"] = limits.maxbatch
    props["ReceiveRequest"]["wait_seconds"]["maximum"] = limits.maxwaitseconds
    components["OutgoingMessage"]["if"] = {
        "properties": {"encoding": {"const": "base64"}},
        "required": ["encoding"],
    }
    components["OutgoingMessage"]["then"] = {
        "properties": {"body": {"contentEncoding": "base64", "pattern": BASE64_PATTERN}}
    }


@functools.cache
def openapi_document(
    routes: Sequence[Route], limits: LimitsSettings, keyed: bool
) -> dict[str, Any]:
    """Return the OpenAPI document of ``routes`` under ``limits`` for a node that needs
    keys (``keyed``) or not: without keys, no operation asks for one, none answers 401
    or 403, and the key routes are absent (built once per triple)."""
    documented = [r for r in routes if r.summary and (keyed or not r.needs_keys)]
    kinds = {k for r in documented for k in (r.request, r.response) if k} | {s.ErrorBody}
    _, components = msgspec.json.schema_components(
        sorted(kinds, key=lambda k: k.__name__), ref_template=_REF
    )
    _apply_limits(components, limits)
    paths: dict[str, dict[str, Any]] = {}
    for route in documented:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, limits, keyed)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Dynamiq v2",
            "version": __version__,
            "description": "Batch API of the Dynamiq queue daemon. Message ids are decimal "
            "strings; bodies are UTF-8 text or base64 per the `encoding` field.",
        },
        "paths": paths,
        "components": {"schemas": components, **_SECURITY} if keyed else {"schemas": components},
    }
