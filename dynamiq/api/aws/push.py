"""SNS's push subscriptions (protocols ``http`` and ``https``): subscribing an endpoint,
confirming it, its attributes and how listings show it.

A push subscription's ARN ends in its id, as in SNS; its queue is the node's
own. ``Subscribe`` answers ``pending confirmation`` until the endpoint
confirms (the ARN with ``ReturnSubscriptionArn``); listings show
``PendingConfirmation`` in its place meanwhile, as SNS does.
"""

from __future__ import annotations

import json
from typing import Any

from dynamiq.api.aws.call import Call
from dynamiq.api.aws.errors import SnsError, invalid_parameter
from dynamiq.errors import Invalid, TopicNotFound
from dynamiq.push.policy import effective_subscription_policy, shown_policy
from dynamiq.service.push.webhooks import Webhooks
from dynamiq.service.reports import PushView, SubscriptionView

__all__ = [
    "PROTOCOLS",
    "PUSH_ATTRIBUTES",
    "configure_push",
    "confirm_subscription",
    "push_attributes",
    "push_listed",
    "subscribe_endpoint",
]

PROTOCOLS = ("http", "https")
PUSH_ATTRIBUTES = frozenset({"DeliveryPolicy", "RedrivePolicy", "RawMessageDelivery"})


def webhooks_of(call: Call) -> Webhooks:
    webhooks = call.node.webhooks
    if webhooks is None:
        raise invalid_parameter("Protocol: this node pushes to no endpoint")
    return webhooks


async def subscribe_endpoint(
    call: Call, topic: str, protocol: str, settings: dict[str, Any]
) -> dict[str, Any]:
    """``Subscribe`` for an HTTP/S endpoint, with the subscription's other ``settings``
    (filter, raw delivery) and its ``DeliveryPolicy``/``RedrivePolicy`` attributes."""
    given = call.params.mapping("Attributes")
    policy = given.get("DeliveryPolicy")
    try:
        view = await webhooks_of(call).subscribe(
            topic,
            protocol,
            call.params.text("Endpoint"),
            settings["filter_policy"],
            settings["filter_scope"],
            raw=not settings["envelope"],
            delivery_policy=policy or None,
            dead_letter=_dead_letter(call, given.get("RedrivePolicy")),
            strict=True,
        )
    except Invalid as refused:
        raise _refusal(refused, "Attributes Reason: ") from None
    assert view.push is not None
    arn = f"{call.topic_arn(topic)}:{view.push.id}"
    wants_arn = call.params.optional_text("ReturnSubscriptionArn") == "true"
    shown = arn if view.push.state == "confirmed" or wants_arn else "pending confirmation"
    return {"SubscriptionArn": shown}


def _refusal(refused: Invalid, said: str = "") -> SnsError:
    """A refusal in SNS's words: the parameter to blame, then why."""
    if refused.field in ("filter", "filter_scope"):
        prefix = "FilterPolicy: " if refused.field == "filter" else ""
        return invalid_parameter(f"{said}{prefix}{refused}")
    return invalid_parameter(f"{refused.field or 'Endpoint'}: {refused}")


def _dead_letter(call: Call, text: object) -> str | None:
    """The queue a ``RedrivePolicy`` names (None for none)."""
    if text in (None, ""):
        return None
    try:
        policy = json.loads(str(text))
        arn = policy["deadLetterTargetArn"]
    except (ValueError, TypeError, KeyError):
        raise invalid_parameter(
            "RedrivePolicy: deadLetterTargetArn is missing or not JSON"
        ) from None
    return call.name_of_arn(arn, "RedrivePolicy")


async def confirm_subscription(call: Call) -> dict[str, Any]:
    """``ConfirmSubscription``: what fetching ``SubscribeURL`` does, by an SNS call."""
    arn = call.params.text("TopicArn")
    try:
        topic = call.name_of_arn(arn, "TopicArn", "sns")
        call.node.require_topic(topic)
    except (SnsError, TopicNotFound):
        raise invalid_parameter("Topic") from None
    try:
        view = await webhooks_of(call).confirm(topic, call.params.text("Token"))
    except Invalid:
        raise invalid_parameter("Token") from None
    assert view.push is not None
    return {"SubscriptionArn": f"{call.topic_arn(topic)}:{view.push.id}"}


def push_listed(call: Call, topic: str, push: PushView) -> dict[str, str]:
    """A push subscription as listings show it."""
    arn = f"{call.topic_arn(topic)}:{push.id}"
    return {
        "SubscriptionArn": arn if push.state == "confirmed" else "PendingConfirmation",
        "TopicArn": call.topic_arn(topic),
        "Protocol": push.protocol,
        "Endpoint": push.url,
    }


def push_attributes(call: Call, topic: str, push: PushView) -> dict[str, str]:
    """``GetSubscriptionAttributes``'s own for a push subscription."""
    pending = push.state == "pending"
    kept = call.node.topic_settings(topic).sns_attributes or {}
    topic_policy = json.loads(kept.get("DeliveryPolicy", "{}"))
    own = json.loads(push.delivery_policy) if push.delivery_policy else {}
    attributes = {
        "SubscriptionArn": f"{call.topic_arn(topic)}:{push.id}",
        "Protocol": push.protocol,
        "Endpoint": push.url,
        "RawMessageDelivery": str(push.raw).lower(),
        "PendingConfirmation": str(pending).lower(),
        "ConfirmationWasAuthenticated": str(not pending).lower(),
        "EffectiveDeliveryPolicy": json.dumps(effective_subscription_policy(topic_policy, own)),
    }
    if own:
        attributes["DeliveryPolicy"] = json.dumps(shown_policy(own))
    if push.dead_letter_queue is not None:
        target = call.queue_arn(push.dead_letter_queue)
        attributes["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": target})
    return attributes


async def configure_push(call: Call, view: SubscriptionView, name: str, value: str) -> None:
    """``SetSubscriptionAttributes`` of ``DeliveryPolicy``, ``RedrivePolicy`` or
    ``RawMessageDelivery`` on a push subscription."""
    assert view.push is not None
    changes: dict[str, Any] = {}
    if name == "DeliveryPolicy":
        changes["delivery_policy"] = value or None
    elif name == "RedrivePolicy":
        changes["dead_letter"] = _dead_letter(call, value)
    elif value.lower() in ("true", "false"):
        changes["raw"] = value.lower() == "true"
    else:
        raise invalid_parameter(
            f"RawMessageDelivery: Invalid value [{value}]. Must be true or false."
        )
    try:
        await webhooks_of(call).configure(view.push.id, **changes)
    except Invalid as refused:
        raise _refusal(refused) from None
