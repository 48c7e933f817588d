"""Who signed an SQS or SNS request: the SigV4 door of the endpoint while keys are on.

``auth.sqs`` says how callers get in: ``sigv4`` (the default) checks every
request's signature against the AWS credentials keys carry (``access.sigv4``,
through the guard, which throttles failing signatures per address); ``open``
serves everyone, unsigned (as an API served without keys: decided
before here); ``closed`` refuses everyone.

A request is checked as it arrived: its raw path and query, its headers (all
of them, repeated ones too), its body. Behind a proxy that rewrites ``Host``
the signature cannot hold, unless ``auth.trustedproxies`` names the proxy: then
its ``X-Forwarded-Host`` stands for ``Host`` and its ``X-Forwarded-Proto``
says whether the client used TLS (``aws:SecureTransport``).
"""

from __future__ import annotations

import time

from aiohttp import web

from dynamiq.access.sigv4 import SignedRequest
from dynamiq.api.aws.errors import AwsError
from dynamiq.api.aws.grants import Caller, Seen
from dynamiq.api.context import Services

__all__ = ["signed_caller"]


def _arrived(request: web.Request, body: bytes, proxied: bool) -> SignedRequest:
    path, _, query = request.raw_path.partition("?")
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers]
    forwarded = request.headers.get("X-Forwarded-Host") if proxied else None
    if forwarded is not None:
        headers = [(k, forwarded if k.lower() == "host" else v) for k, v in headers]
    return SignedRequest(request.method, path, query, headers, body)


def _secure(request: web.Request, proxied: bool) -> bool:
    """Whether the client reached the node over TLS (said by a trusted proxy, if one)."""
    said = request.headers.get("X-Forwarded-Proto") if proxied else None
    return request.secure if said is None else said.strip().lower() == "https"


def signed_caller(request: web.Request, services: Services, service: str, body: bytes) -> Caller:
    """The caller who signed ``request`` for ``service`` (``sqs`` or ``sns``).

    Raises:
        SignatureRefused: the signature does not let it in.
        TooManyRequests: too many failing signatures from its address lately.
        AwsError: the endpoint is closed (``auth.sqs = closed``).
    """
    door = services.aws
    if door.mode != "sigv4":
        raise AwsError(
            "AccessDenied",
            "The SQS endpoint is not served while this node needs keys "
            "(auth.sqs = sigv4 serves it to AWS credentials).",
        )
    remote = request.remote or ""
    proxied = door.trusts(remote)
    principal = services.guard.identify_signed(
        _arrived(request, body, proxied),
        remote,
        region=services.sqs.region,
        services=(service,),
        max_skew=door.max_skew,
        presigned=door.presigned,
    )
    source = request.headers.get("X-Forwarded-For", "").split(",")[-1].strip() if proxied else ""
    seen = Seen(
        _secure(request, proxied),
        source or remote,
        request.headers.get("User-Agent", ""),
        time.time(),
    )
    return Caller(principal, services.accounts.of(principal.application), True, seen)
