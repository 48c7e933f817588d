"""Calls checked against the served OpenAPI document: status and body schema."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import jsonschema
import pytest
from aiohttp.test_utils import TestClient
from openapi_spec_validator import validate

__all__ = ["Http", "call", "spec"]

Http = TestClient[Any, Any]


@pytest.fixture
async def spec(http: Http) -> dict[str, Any]:
    response = await http.get("/v2/openapi.json")
    assert response.status == 200
    document: dict[str, Any] = await response.json()
    validate(document)  # a valid OpenAPI 3.1 document
    return document


def _operation(spec: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    path = path.partition("?")[0]
    for template, ops in spec["paths"].items():
        pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        if re.match(pattern, path) and method.lower() in ops:
            op: dict[str, Any] = ops[method.lower()]
            return op
    raise AssertionError(f"{method} {path} is not documented")


async def call(
    http: Http, spec: dict[str, Any], method: str, path: str, status: int, body: Any = None
) -> Any:
    """Make a real request and check its status and body against the document."""
    # A body of a megabyte or more goes as a stream (aiohttp warns of one sent as bytes).
    sent = None if body is None else io.BytesIO(json.dumps(body).encode())
    headers = None if sent is None else {"Content-Type": "application/json"}
    response = await http.request(method, path, data=sent, headers=headers)
    data = await response.json()
    assert response.status == status, data
    documented = _operation(spec, method, path)["responses"]
    assert str(status) in documented, f"{status} undocumented for {method} {path}"
    schema = documented[str(status)]["content"]["application/json"]["schema"]
    jsonschema.validate(
        data, {**schema, "components": spec["components"]}, cls=jsonschema.Draft202012Validator
    )
    return data


async def publish(
    http: Http, spec: dict[str, Any], path: str, *messages: Any, status: int = 200
) -> Any:
    """Publish ``messages`` (bodies, or whole messages) to the queue or topic at ``path``;
    return the answer, after checking its ``status``."""
    body = {"messages": [m if isinstance(m, dict) else {"body": m} for m in messages]}
    return await call(http, spec, "POST", path, status, body)


async def depth(http: Http, spec: dict[str, Any], queue: str) -> int:
    """Return a queue's depth, as its documented GET answers it."""
    found: int = (await call(http, spec, "GET", f"/v2/queues/{queue}", 200))["stats"]["depth"]
    return found


async def receive(
    http: Http, spec: dict[str, Any], queue: str, n: int = 10, wait: float = 0
) -> list[dict[str, Any]]:
    """Lease up to ``n`` messages, waiting up to ``wait`` seconds; return them."""
    body = {"max_messages": n, "wait_seconds": wait}
    got = await call(http, spec, "POST", f"/v2/queues/{queue}/receive", 200, body)
    messages: list[dict[str, Any]] = got["messages"]
    return messages
