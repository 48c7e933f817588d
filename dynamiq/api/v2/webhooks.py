"""v2 webhooks: a topic's messages pushed to HTTP/S endpoints (SNS's push subscriptions,
the same ones: a webhook made here is an ``http``/``https`` subscription to SNS
clients, and one made through SNS is listed here)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from aiohttp import web

from dynamiq.access.roles import Access, Principal
from dynamiq.api import schemas as s
from dynamiq.api.bodies import json_response, read_json
from dynamiq.api.routes import Route, node, topic_name, who
from dynamiq.errors import Invalid, NotFound
from dynamiq.service.node import Node
from dynamiq.service.push.webhooks import Webhooks
from dynamiq.service.reports import SubscriptionView

__all__ = ["WEBHOOK_ROUTES"]


def _webhooks(request: web.Request) -> Webhooks:
    webhooks = node(request).webhooks
    if webhooks is None:
        raise NotFound("this node pushes to no endpoint")
    return webhooks


async def _info(
    node_: Node, topic: str, view: SubscriptionView, caller: Principal
) -> s.WebhookInfo:
    push = view.push
    assert push is not None
    webhooks = node_.webhooks
    assert webhooks is not None
    [stats] = await node_.queue_stats([view.queue])
    return s.WebhookInfo(
        push.id,
        caller.shown(topic),
        push.url,
        webhooks.state(push),
        push.raw,
        view.filter,
        view.filter_scope,
        json.loads(push.delivery_policy) if push.delivery_policy else None,
        None if push.dead_letter_queue is None else caller.shown(push.dead_letter_queue),
        stats.depth - stats.in_flight,
        stats.in_flight,
    )


def _find(request: web.Request, topic: str) -> SubscriptionView:
    wanted = request.match_info["id"]
    view = node(request).subscribed(topic).webhook(wanted)
    if view is None:
        raise NotFound(f"topic {topic!r} has no webhook {wanted!r}")
    return view


# What the webhooks' rules call a field, as v2 names it.
_FIELDS = {
    "Endpoint": "url",
    "RedrivePolicy": "dead_letter_queue",
    "DeliveryPolicy": "delivery_policy",
}


def _policy(given: dict[str, Any] | None) -> str | None:
    return None if given is None else json.dumps(given)


async def create_webhook(request: web.Request) -> web.Response:
    """Push a topic's messages to an endpoint: 201 (the endpoint is asked to confirm
    first; the same URL again answers the webhook it has)."""
    topic, caller = topic_name(request), who(request)
    node(request).require_topic(topic)
    body = await read_json(request, s.WebhookBody)
    protocol = body.url.partition(":")[0].lower()
    if protocol not in ("http", "https"):
        raise Invalid("url: must be an http or https URL", "url")
    dead = None if body.dead_letter_queue is None else caller.name_of(body.dead_letter_queue)
    try:
        view = await _webhooks(request).subscribe(
            topic,
            protocol,
            body.url,
            body.filter,
            body.filter_scope,
            raw=body.raw,
            delivery_policy=_policy(body.delivery_policy),
            dead_letter=dead,
        )
    except Invalid as refused:
        raise _named(refused) from None
    return json_response(await _info(node(request), topic, view, caller), status=201)


def _named(refused: Invalid) -> Invalid:
    """A refusal that names its field as v2 does."""
    field = _FIELDS.get(refused.field or "", refused.field)
    return Invalid(f"{field}: {refused}", field)


async def list_webhooks(request: web.Request) -> web.Response:
    """A topic's webhooks."""
    topic, caller = topic_name(request), who(request)
    views = [v for v in node(request).subscriptions(topic) if v.push is not None]
    listed = [await _info(node(request), topic, v, caller) for v in views]
    return json_response(s.WebhookList(listed))


async def get_webhook(request: web.Request) -> web.Response:
    """One webhook, with its deliveries waiting and under way."""
    topic = topic_name(request)
    return json_response(await _info(node(request), topic, _find(request, topic), who(request)))


async def change_webhook(request: web.Request) -> web.Response:
    """Change a webhook's raw bodies, delivery policy or dead-letter queue."""
    topic, caller = topic_name(request), who(request)
    view = _find(request, topic)
    assert view.push is not None
    body = await read_json(request, s.WebhookChange)
    changes: dict[str, Any] = {}
    if body.raw is not None:
        changes["raw"] = body.raw
    if body.delivery_policy is not msgspec.UNSET:
        changes["delivery_policy"] = _policy(body.delivery_policy)
    if body.dead_letter_queue is not msgspec.UNSET:
        named = body.dead_letter_queue
        changes["dead_letter"] = None if named is None else caller.name_of(named)
    try:
        changed = await _webhooks(request).configure(view.push.id, **changes)
    except Invalid as refused:
        raise _named(refused) from None
    return json_response(await _info(node(request), topic, changed, caller))


async def delete_webhook(request: web.Request) -> web.Response:
    """Stop pushing to an endpoint; what it had still to get is dropped."""
    topic = topic_name(request)
    view = _find(request, topic)
    assert view.push is not None
    await _webhooks(request).unsubscribe(view.push.id)
    return json_response({"deleted": True})


async def rotate_signing_key(request: web.Request) -> web.Response:
    """Make the cluster a new key to sign what it pushes (the old one's certificate stays
    served); this node signs with it at once, every other within a minute."""
    webhooks = _webhooks(request)
    key_id = await webhooks.rotate_key()
    return json_response(s.SigningKeyInfo(key_id, webhooks.documents.cert_url()))


W = "/v2/topics/{topic}/webhooks"
WEBHOOK_ROUTES: tuple[Route, ...] = (
    Route(
        "POST",
        W,
        create_webhook,
        "Push a topic's messages to an HTTP/S endpoint",
        s.WebhookBody,
        s.WebhookInfo,
        201,
        access=Access.MANAGE,
    ),
    Route(
        "GET", W, list_webhooks, "A topic's webhooks", response=s.WebhookList, access=Access.READ
    ),
    Route(
        "GET",
        f"{W}/{{id}}",
        get_webhook,
        "Describe a webhook",
        response=s.WebhookInfo,
        access=Access.READ,
    ),
    Route(
        "PATCH",
        f"{W}/{{id}}",
        change_webhook,
        "Change a webhook",
        s.WebhookChange,
        s.WebhookInfo,
        access=Access.MANAGE,
    ),
    Route("DELETE", f"{W}/{{id}}", delete_webhook, "Stop a webhook", access=Access.MANAGE),
    Route(
        "POST",
        "/v2/signing-key",
        rotate_signing_key,
        "Rotate the key pushes are signed with",
        response=s.SigningKeyInfo,
        body_required=False,
        access=Access.ADMIN,
    ),
)
