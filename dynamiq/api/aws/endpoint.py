"""The SQS- and SNS-compatible endpoint: ``POST /`` as AWS SDKs call it, on the node's own port.

Two protocols reach the same actions. The AWS JSON 1.0 protocol (what current
SDKs send to SQS): ``X-Amz-Target: AmazonSQS.<Action>`` names the action,
the body holds its parameters, the answer is JSON; errors carry SQS's shape
in ``__type`` and its legacy code in ``x-amzn-query-error``. The query
protocol (older SQS SDKs, and every SNS SDK): a form with ``Action=...``,
posted to ``/`` or to a queue's URL, answered in XML (``query``). Each
action is one function of ``queues``, ``messages``, ``moves`` or ``topics``, found here
by name, answering the JSON protocol's object whichever protocol asked.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from dynamiq.access.roles import Access
from dynamiq.api import console
from dynamiq.api.auth import caller, cross_site
from dynamiq.api.aws import query
from dynamiq.api.aws.call import Action, Answer, Call, Leasing
from dynamiq.api.aws.door import signed_caller
from dynamiq.api.aws.errors import COMMON, AwsError, sns_error, sqs_error
from dynamiq.api.aws.grants import Caller
from dynamiq.api.aws.messages import MESSAGE_ACTIONS
from dynamiq.api.aws.moves import MOVE_ACTIONS
from dynamiq.api.aws.params import Params
from dynamiq.api.aws.policies import POLICY_ACTIONS
from dynamiq.api.aws.queues import QUEUE_ACTIONS
from dynamiq.api.aws.topic_settings import TOPIC_SETTING_ACTIONS
from dynamiq.api.aws.topics import TOPIC_ACTIONS
from dynamiq.api.context import Services, services_of
from dynamiq.api.delivery import deliver
from dynamiq.api.errors import error_response
from dynamiq.api.routes import Route, route_defs
from dynamiq.errors import DynamiqError, Forbidden, PayloadTooLarge

__all__ = ["ROUTES", "SNS_ACTIONS", "SQS_ACTIONS", "routes"]

TARGET_PREFIX = "AmazonSQS."
JSON_TYPE = "application/x-amz-json-1.0"
XML_TYPE = "text/xml"
SQS_ACTIONS: dict[str, Action] = {
    **QUEUE_ACTIONS,
    **MESSAGE_ACTIONS,
    **MOVE_ACTIONS,
    **POLICY_ACTIONS,
}
SNS_ACTIONS: dict[str, Action] = {**TOPIC_ACTIONS, **TOPIC_SETTING_ACTIONS}
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
# Request ids look like AWS's (UUIDs): this process's random prefix and a count.
_ID_PREFIX = str(uuid.uuid4())[:24]
_ids = itertools.count()


@dataclass(frozen=True)
class _Wire:
    """One protocol of one service: how its answers and errors are written."""

    actions: dict[str, Action]
    answer: Callable[[str, dict[str, Any], str], web.Response]
    error: Callable[[AwsError, str], web.Response]
    translate: Callable[[DynamiqError], AwsError]
    dialect: query.Dialect | None = None  # the query protocol's; None: JSON


def _json_answer(action: str, body: dict[str, Any], request_id: str) -> web.Response:
    return web.Response(
        body=_encode(body), headers={"Content-Type": JSON_TYPE, "x-amzn-RequestId": request_id}
    )


def _json_error(error: AwsError, request_id: str) -> web.Response:
    headers = {
        "Content-Type": JSON_TYPE,
        "x-amzn-RequestId": request_id,
        "x-amzn-query-error": f"{error.query_code};{'Sender' if error.sender else 'Receiver'}",
        **_retry(error),
    }
    namespace = "com.amazon.coral.service" if error.shape in COMMON else "com.amazonaws.sqs"
    body = {"__type": f"{namespace}#{error.shape}", "message": error.message}
    return web.Response(status=error.status, body=_encode(body), headers=headers)


def _xml(dialect: query.Dialect) -> tuple[Callable[..., web.Response], Callable[..., web.Response]]:
    def answer(action: str, body: dict[str, Any], request_id: str) -> web.Response:
        document = query.document(dialect, action, body, request_id)
        return web.Response(body=document, headers=_xml_headers(request_id))

    def error(error: AwsError, request_id: str) -> web.Response:
        document = query.error_document(dialect, error, request_id)
        headers = {**_xml_headers(request_id), **_retry(error)}
        return web.Response(status=error.status, body=document, headers=headers)

    return answer, error


def _retry(error: AwsError) -> dict[str, str]:
    """``Retry-After`` for an error that says when to try again (a throttle, a 503)."""
    return {} if error.retry_after is None else {"Retry-After": str(error.retry_after)}


def _xml_headers(request_id: str) -> dict[str, str]:
    return {"Content-Type": XML_TYPE, "x-amzn-RequestId": request_id}


_SQS_JSON = _Wire(SQS_ACTIONS, _json_answer, _json_error, sqs_error)
_SQS_QUERY = _Wire(SQS_ACTIONS, *_xml(query.SQS), sqs_error, query.SQS)
_SNS_QUERY = _Wire(SNS_ACTIONS, *_xml(query.SNS), sns_error, query.SNS)


def _request_id() -> str:
    return f"{_ID_PREFIX}{next(_ids) % (1 << 48):012x}"


def _speaks_json(request: web.Request) -> bool:
    """Whether a request is in the AWS JSON protocol (else a query-protocol form)."""
    return "X-Amz-Target" in request.headers or request.content_type.endswith("json")


async def endpoint(request: web.Request) -> web.StreamResponse:
    """Run the action the request names; answer as SQS or SNS does, errors included."""
    request_id = _request_id()
    wire = _SQS_JSON
    try:
        raw = await request.read()
        if _speaks_json(request):
            name = request.headers.get("X-Amz-Target", "")
            action = SQS_ACTIONS.get(name.removeprefix(TARGET_PREFIX))
            if not name.startswith(TARGET_PREFIX):
                action = None
            data = None  # read once the caller is known: refusing who may not call comes first
        else:
            form = await _form(request)
            name = next((str(v) for k, v in form if k == "Action"), "")
            wire = _SNS_QUERY if _is_sns(request, name, form) else _SQS_QUERY
            action = wire.actions.get(name)
            assert wire.dialect is not None
            data = query.params(wire.dialect, ((k, str(v)) for k, v in form), name)
            if "account" in request.match_info:  # posted to the queue's own URL
                data.setdefault("QueueUrl", request.path)
        name = name.removeprefix(TARGET_PREFIX)
        services = services_of(request)
        service = "sns" if wire is _SNS_QUERY else "sqs"
        who = _caller(request, services, service, raw)
        if data is None:
            data = _json_parameters(raw)
        if action is None:
            raise AwsError("InvalidAction", f"The action {name or '(none)'} is not valid.")
        base = f"{request.scheme}://{request.host}"
        params = Params(data)
        call = Call(
            services.node, services.sqs, base, params, name, service, who, services.accounts
        )
        return await _answer(request, wire, name, await action(call), request_id)
    except web.HTTPRequestEntityTooLarge:
        error: DynamiqError = _too_large(request)
    except DynamiqError as exc:
        error = exc
    return error_response(request, lambda e: wire.error(wire.translate(e), request_id), error)


async def _form(request: web.Request) -> list[tuple[str, Any]]:
    """A query-protocol request's parameters: those of its query (a presigned URL's,
    the signature's own left out), then its form's."""
    if request.method != "POST" and cross_site(request.headers, request.host):
        raise Forbidden("requests from other sites' pages may not call SQS or SNS here")
    given = [(k, v) for k, v in request.query.items() if not k.startswith("X-Amz-")]
    return given + list((await request.post()).items())


async def _front_door(request: web.Request) -> web.StreamResponse:
    """``GET /``: a presigned SQS or SNS URL (it names an action), else the console."""
    if "Action" in request.query:
        return await endpoint(request)
    return await console.index(request)


def _caller(request: web.Request, services: Services, service: str, raw: bytes) -> Caller:
    """Who calls: everyone, unchecked, where keys are off or the endpoint is open (a
    request signed for another region is still refused: it meant another endpoint);
    else whoever signed it."""
    principal = caller(request)
    if principal is None:
        return signed_caller(request, services, service, raw)
    region = _scope(request)[0]
    if region is not None and region != services.sqs.region:
        raise AwsError(
            "SignatureDoesNotMatch",
            f"Credential should be scoped to a valid region, not '{region}'.",
        )
    return Caller(principal, services.accounts.of(principal.application))


def _scope(request: web.Request) -> tuple[str | None, str | None]:
    """The region and service a SigV4 signature is scoped to (``Credential=key/date/
    region/service/aws4_request``, in the header or a presigned URL); Nones for an
    unsigned request.

    A node serves one region (``sqs.region``): a request signed for another is
    refused as AWS refuses it, so that it never reaches a queue of the same
    name that the client meant to be elsewhere.
    """
    header = request.headers.get("Authorization", "")
    _, found, rest = header.partition("Credential=")
    scope = rest.partition(",")[0] if found else request.query.get("X-Amz-Credential", "")
    parts = scope.strip().split("/")
    return (parts[2], parts[3]) if len(parts) == 5 else (None, None)


def _is_sns(request: web.Request, name: str, form: list[tuple[str, Any]]) -> bool:
    """Whether a query-protocol request is SNS's: its action is SNS's alone, or, for one
    both services have (``AddPermission``, ``RemovePermission``), it was signed for
    SNS, or names a topic."""
    if name not in SNS_ACTIONS:
        return False
    if name not in SQS_ACTIONS:
        return True
    service = _scope(request)[1]
    return service == "sns" if service else any(k == "TopicArn" for k, _ in form)


def _refusal(request: web.Request, error: DynamiqError) -> web.StreamResponse:
    """A request the door or the limits on bodies refused, before its body was read:
    answered in the protocol's own shape (SQS's, the action unknown yet for a form)."""
    request_id = _request_id()
    wire = _SQS_JSON if _speaks_json(request) else _SQS_QUERY
    if isinstance(error, PayloadTooLarge):
        error = _too_large(request)
    return error_response(request, lambda e: wire.error(wire.translate(e), request_id), error)


def _too_large(request: web.Request) -> AwsError:
    """What SQS answers a request larger than the node takes (``limits.maxbodybytes``): a
    batch too long, or a message, each named by SQS's own limit on them (the node's
    ``limits.maxmessagebytes``)."""
    most, sent = services_of(request).node.limits.maxmessagebytes, request.content_length
    if request.headers.get("X-Amz-Target", "").endswith("Batch"):
        return AwsError(
            "BatchRequestTooLong",
            f"Batch requests cannot be longer than {most} bytes. You have sent {sent} bytes.",
        )
    return AwsError(
        "InvalidParameterValue",
        f"One or more parameters are invalid. Reason: Message must be shorter than {most} bytes.",
    )


async def _answer(
    request: web.Request, wire: _Wire, name: str, answer: Answer, request_id: str
) -> web.StreamResponse:
    if isinstance(answer, Leasing):
        render = answer.render
        return await deliver(
            request, answer.ask, lambda got: wire.answer(name, render(got), request_id)
        )
    return wire.answer(name, answer, request_id)


def _json_parameters(raw: bytes) -> dict[str, Any]:
    try:
        data = _decode(raw) if raw else {}
    except msgspec.DecodeError:
        data = None
    if not isinstance(data, dict):
        raise AwsError("SerializationException", "The request body is not a JSON object.")
    return data


def _link(action: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A link SNS puts in what it sends an endpoint (``SubscribeURL``, ``UnsubscribeURL``):
    the action, its parameters in the query, answered as SNS answers it. Open to all:
    the token, or the subscription's id, is the secret."""

    async def follow(request: web.Request) -> web.StreamResponse:
        request_id = _request_id()
        try:
            services = services_of(request)
            base = f"{request.scheme}://{request.host}"
            call = Call(services.node, services.sqs, base, Params(dict(request.query)))
            answer = await SNS_ACTIONS[action](call)
            return await _answer(request, _SNS_QUERY, action, answer, request_id)
        except DynamiqError as exc:
            translated = _SNS_QUERY.translate(exc)
            return error_response(request, lambda e: _SNS_QUERY.error(translated, request_id), exc)

    return follow


async def _certificate(request: web.Request) -> web.StreamResponse:
    """The certificate of the key the cluster signs with (PEM), at ``SigningCertURL``."""
    webhooks = services_of(request).node.webhooks
    pem = webhooks.certificate(request.match_info["key"]) if webhooks is not None else None
    if pem is None:
        return web.Response(status=404, text="no such signing certificate")
    return web.Response(body=pem, content_type="application/x-pem-file")


ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/sns/confirm",
        _link("ConfirmSubscription"),
        summary="SNS: an endpoint confirms its subscription (SubscribeURL)",
        access=Access.OPEN,
    ),
    Route(
        "GET",
        "/sns/unsubscribe",
        _link("Unsubscribe"),
        summary="SNS: an endpoint ends its subscription (UnsubscribeURL)",
        access=Access.OPEN,
    ),
    Route(
        "GET",
        "/sns/cert/{key}.pem",
        _certificate,
        summary="SNS: the certificate signatures are checked with (SigningCertURL)",
        access=Access.OPEN,
    ),
    Route(
        "GET",
        "/",
        _front_door,
        summary="The console's page; SQS and SNS presigned URLs (query protocol)",
        access=Access.OPEN,
    ),
    Route(
        "GET",
        r"/{account:\d{12}}/{queue}",
        endpoint,
        summary="SQS presigned URLs at a queue's URL (query protocol)",
        access=Access.OPEN,
    ),
    Route(
        "POST",
        "/",
        endpoint,
        summary="SQS and SNS (AWS JSON 1.0 and query protocols)",
        access=Access.OPEN,
    ),
    Route(
        "POST",
        r"/{account:\d{12}}/{queue}",
        endpoint,
        summary="SQS at a queue's URL (query)",
        access=Access.OPEN,
    ),
)


def routes() -> list[web.RouteDef]:
    """Return the SQS and SNS routes (served only when ``auth.sqs = open`` while keys are on:
    AWS SDKs sign requests with SigV4, which application keys do not do)."""
    return route_defs(ROUTES, api="sqs", refusal=_refusal)
