"""The OpenAPI 3.1 document of the v2 API; its schemas come from the structs the handlers use."""

from __future__ import annotations

import functools
from typing import Any

import msgspec

from dynamiq import __version__
from dynamiq.api import schemas as s

__all__ = ["openapi_document"]

_REF = "#/components/schemas/{name}"

# (method, path, summary, request body struct, success status, response struct)
_OPERATIONS: list[tuple[str, str, str, type | None, int, type | None]] = [
    ("get", "/v2/queues", "List queues", None, 200, s.QueueList),
    ("put", "/v2/queues/{queue}", "Create a queue", s.QueueSettingsBody, 201, s.QueueInfo),
    ("get", "/v2/queues/{queue}", "Describe a queue", None, 200, s.QueueInfo),
    ("patch", "/v2/queues/{queue}", "Change queue settings", s.QueueSettingsBody, 200, s.QueueInfo),
    ("delete", "/v2/queues/{queue}", "Delete a queue and its messages", None, 200, None),
    (
        "post",
        "/v2/queues/{queue}/messages",
        "Publish messages",
        s.PublishRequest,
        200,
        s.PublishResponse,
    ),
    (
        "get",
        "/v2/queues/{queue}/messages/{id}",
        "Read a message without leasing it",
        None,
        200,
        s.PeekResponse,
    ),
    (
        "post",
        "/v2/queues/{queue}/receive",
        "Lease messages (long poll with wait_seconds)",
        s.ReceiveRequest,
        200,
        s.ReceiveResponse,
    ),
    (
        "post",
        "/v2/queues/{queue}/delete",
        "Delete messages",
        s.DeleteRequest,
        200,
        s.DeleteResponse,
    ),
    (
        "post",
        "/v2/queues/{queue}/visibility",
        "Extend leases, or end them with 0",
        s.VisibilityRequest,
        200,
        s.VisibilityResponse,
    ),
    (
        "get",
        "/v2/queues/{queue}/stats",
        "A queue's contents, oldest message age and rates",
        None,
        200,
        s.QueueStatsDetail,
    ),
    (
        "get",
        "/v2/queues/{queue}/peek",
        "The oldest messages, without leasing them (?max=N)",
        None,
        200,
        s.ReceiveResponse,
    ),
    ("get", "/v2/stats", "Every queue's stats and their sums", None, 200, s.NodeStats),
    ("get", "/v2/status", "This node and the cluster members it sees", None, 200, s.Status),
    ("get", "/v2/topics", "List topics", None, 200, s.TopicList),
    ("put", "/v2/topics/{topic}", "Create a topic", None, 201, s.TopicInfo),
    ("get", "/v2/topics/{topic}", "Describe a topic", None, 200, s.TopicInfo),
    ("delete", "/v2/topics/{topic}", "Delete a topic", None, 200, None),
    (
        "put",
        "/v2/topics/{topic}/subscriptions/{queue}",
        "Subscribe a queue",
        None,
        200,
        s.TopicInfo,
    ),
    (
        "delete",
        "/v2/topics/{topic}/subscriptions/{queue}",
        "Unsubscribe a queue",
        None,
        200,
        s.TopicInfo,
    ),
    (
        "post",
        "/v2/topics/{topic}/messages",
        "Publish to every subscribed queue",
        s.PublishRequest,
        200,
        s.TopicPublishResponse,
    ),
]

_ERRORS = {
    "400": "Malformed JSON",
    "404": "No such queue, topic or message",
    "409": "The name is taken",
    "413": "Body larger than limits.maxbodybytes",
    "422": "Invalid input (types, ranges, names, batch size)",
    "503": "The store is unavailable; retry after Retry-After seconds",
}


_QUERY = {
    "/v2/queues/{queue}/peek": [
        {
            "name": "max",
            "in": "query",
            "required": False,
            "schema": {"type": "integer", "minimum": 1, "default": 10},
        },
    ],
}


def _ref(kind: type) -> dict[str, str]:
    return {"$ref": _REF.format(name=kind.__name__)}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _operation(
    path: str, summary: str, request: type | None, status: int, response: type | None
) -> dict[str, Any]:
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in ("queue", "topic", "id")
        if "{" + name + "}" in path
    ]
    ok_schema = (
        _ref(response)
        if response
        else {
            "type": "object",
            "properties": {"deleted": {"type": "boolean"}},
            "required": ["deleted"],
        }
    )
    responses: dict[str, Any] = {str(status): {"description": "OK", "content": _json(ok_schema)}}
    for code, text in _ERRORS.items():
        responses[code] = {"description": text, "content": _json(_ref(s.ErrorBody))}
    op: dict[str, Any] = {"summary": summary, "parameters": params, "responses": responses}
    if request is not None:
        op["requestBody"] = {
            "required": request is not s.QueueSettingsBody,
            "content": _json(_ref(request)),
        }
    return op


@functools.cache
def openapi_document() -> dict[str, Any]:
    """Return the OpenAPI document (built once)."""
    kinds = {k for _, _, _, req, _, resp in _OPERATIONS for k in (req, resp) if k} | {s.ErrorBody}
    _, components = msgspec.json.schema_components(
        sorted(kinds, key=lambda k: k.__name__), ref_template=_REF
    )
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary, request, status, response in _OPERATIONS:
        paths.setdefault(path, {})[method] = _operation(path, summary, request, status, response)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Dynamiq v2",
            "version": __version__,
            "description": "Batch API of the Dynamiq queue daemon. Message ids are decimal "
            "strings; bodies are UTF-8 text or base64 per the `encoding` field.",
        },
        "paths": paths,
        "components": {"schemas": components},
    }
