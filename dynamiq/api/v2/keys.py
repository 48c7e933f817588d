"""The keys API: make, list and revoke application keys (administrators only)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from aiohttp import web

from dynamiq.access.credentials import account_of
from dynamiq.access.guard import Guard, KeyView
from dynamiq.access.keys import MAX_DESCRIPTION, KeySpec
from dynamiq.access.roles import Access
from dynamiq.api.bodies import iso_time, json_response, read_json
from dynamiq.api.context import services_of
from dynamiq.api.routes import Link, Route
from dynamiq.models import APPLICATION_PATTERN

__all__ = ["ROUTES", "KeyInfo", "KeyList", "NewKey", "NewKeyRequest", "SealingKey"]

Role = Literal["admin", "monitor", "manage", "produce-consume", "produce", "consume"]


class NewKeyRequest(msgspec.Struct, forbid_unknown_fields=True):
    """A key to make: its application (namespace), role, and optionally a rate."""

    application: Annotated[str, msgspec.Meta(pattern=f"^{APPLICATION_PATTERN.pattern}$")]
    role: Role
    description: Annotated[str, msgspec.Meta(max_length=MAX_DESCRIPTION)] = ""
    requests_per_second: Annotated[float, msgspec.Meta(gt=0)] | None = None
    aws: bool = False  # with an AWS credential, for the SQS and SNS endpoint's SigV4


class KeyInfo(msgspec.Struct):
    """A key as listed: never its secret."""

    key_id: str
    application: str
    role: str
    description: str
    created: str
    last_used: str | None  # to the minute; null: never
    requests_per_second: float | None
    access_key_id: str | None  # its AWS credential's id; null: it has none


class NewKey(msgspec.Struct):
    """A key just made: ``key`` (``<key_id>.<secret>``) is what requests send, and
    ``secret_access_key`` what AWS SDKs sign with, each shown once."""

    key_id: str
    secret: str
    key: str
    application: str
    role: str
    access_key_id: str | None = None
    secret_access_key: str | None = None
    account: str | None = None  # the application's account, in its ARNs and queue URLs


class SealingKey(msgspec.Struct):
    """The cluster's new sealing key, by id."""

    key_id: str


class KeyList(msgspec.Struct):
    """Every key."""

    keys: list[KeyInfo]


def _info(view: KeyView) -> KeyInfo:
    return KeyInfo(
        view.key_id,
        view.application,
        view.role,
        view.description,
        iso_time(view.created_ms),
        iso_time(view.last_used_ms) if view.last_used_ms else None,
        view.requests_per_second,
        view.access_key_id,
    )


def _guard_of(request: web.Request) -> Guard:
    return services_of(request).guard


async def create_key(request: web.Request) -> web.Response:
    """Make a key; its secret is in this answer only."""
    guard = _guard_of(request)
    body = await read_json(request, NewKeyRequest)
    spec = KeySpec(
        body.application, body.role, body.description, body.requests_per_second, body.aws
    )
    view, made = await guard.create_key(spec)
    new = NewKey(
        view.key_id,
        made.token.partition(".")[2],
        made.token,
        view.application,
        view.role,
        view.access_key_id,
        made.aws_secret,
        account_of(view.application) if made.aws_secret else None,
    )
    return json_response(new, status=201)


async def rotate_sealing_key(request: web.Request) -> web.Response:
    """Seal every AWS secret again under a new cluster key."""
    return json_response(SealingKey(await _guard_of(request).rotate_sealing_key()), status=201)


async def list_keys(request: web.Request) -> web.Response:
    """List the keys (ids, application, role, when made and last used)."""
    return json_response(KeyList([_info(v) for v in _guard_of(request).listed()]))


async def revoke_key(request: web.Request) -> web.Response:
    """Revoke a key on every node."""
    await _guard_of(request).revoke_key(request.match_info["key_id"])
    return json_response({"deleted": True})


ROUTES: tuple[Route, ...] = (
    Route(
        "POST",
        "/v2/keys",
        create_key,
        "Make an application key (shown once)",
        NewKeyRequest,
        NewKey,
        201,
        access=Access.ADMIN,
        links=(Link(revoke_key, {"key_id": "$response.body#/key_id"}),),
        needs_keys=True,
    ),
    Route(
        "GET",
        "/v2/keys",
        list_keys,
        "List application keys",
        response=KeyList,
        access=Access.ADMIN,
        needs_keys=True,
    ),
    Route(
        "POST",
        "/v2/sealing-key",
        rotate_sealing_key,
        "Seal the AWS credentials' secrets under a new cluster key",
        response=SealingKey,
        status=201,
        access=Access.ADMIN,
        needs_keys=True,
    ),
    Route(
        "DELETE",
        "/v2/keys/{key_id}",
        revoke_key,
        "Revoke a key on every node",
        access=Access.ADMIN,
        needs_keys=True,
    ),
)
