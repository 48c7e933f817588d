"""SNS's actions on Dynamiq's topics: queues subscribe by their ARN (protocol ``sqs``).

A topic's ARN is ``arn:aws:sns:<region>:<account>:<topic>``; a queue has one
subscription per topic, so its subscription's ARN is the topic's ARN and the
queue's name. ``FilterPolicy`` is held to SNS's rules and limits (with
``FilterPolicyScope`` ``MessageAttributes`` or ``MessageBody``) and refused
in SNS's words; without ``RawMessageDelivery`` the queue gets each message in
SNS's JSON envelope (``core.notifications``), with it the bare body and its
attributes. Publishing answers SNS's message id, the one the envelopes carry.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import Any

from dynamiq.access.roles import SEPARATOR
from dynamiq.api.aws.archive import replay, replay_asked, replay_attributes
from dynamiq.api.aws.attributes import valid_body
from dynamiq.api.aws.call import Action, Call
from dynamiq.api.aws.errors import SnsError, invalid_parameter, sns_error
from dynamiq.api.aws.params import SNS_BATCHES, Params, batch_entries, checked_entries
from dynamiq.api.aws.push import (
    PROTOCOLS,
    PUSH_ATTRIBUTES,
    configure_push,
    confirm_subscription,
    push_attributes,
    push_listed,
    subscribe_endpoint,
    webhooks_of,
)
from dynamiq.api.aws.sns_attributes import (
    MAX_SNS_MESSAGE_BYTES,
    check_batch,
    message_size,
    sns_attributes,
)
from dynamiq.errors import Invalid, TopicNotFound
from dynamiq.models import TOKEN, Notice, Outgoing
from dynamiq.service.reports import SubscriptionView

__all__ = ["TOPIC_ACTIONS", "named_topic"]

PAGE = 100
SUBSCRIPTION_ATTRIBUTES = frozenset(
    {"FilterPolicy", "FilterPolicyScope", "RawMessageDelivery", "ReplayPolicy"}
)
SCOPES = {"MessageAttributes": "attributes", "MessageBody": "body"}
# SNS's protocols a node does not deliver to (AWS services, phones, mail)
UNSERVED_PROTOCOLS = frozenset({"email", "email-json", "sms", "lambda", "application", "firehose"})
SCOPE_NAMES = {scope: name for name, scope in SCOPES.items()}


MAX_SUBJECT = 100  # characters a subject stays under


def named_topic(call: Call, param: str = "TopicArn") -> str:
    """The topic ``param`` names, authorized for the call's action."""
    return call.topic(param)


def _subscription(call: Call) -> tuple[str, SubscriptionView]:
    """The topic and subscription a ``SubscriptionArn`` names."""
    arn = call.params.optional_text("SubscriptionArn")
    if not arn:
        raise invalid_parameter("SubscriptionArn Reason: no value for required parameter")
    elements = arn.count(":") + 1
    if elements < 6:
        raise invalid_parameter(
            f"SubscriptionArn Reason: An ARN must have at least 6 elements, not {elements}"
        )
    if elements == 6:  # a topic's ARN: no subscription id
        raise invalid_parameter("SubscriptionId")
    topic_arn, _, last = arn.rpartition(":")
    try:
        topic = call.topic_of_arn(topic_arn, "SubscriptionArn")
        subscribed = call.node.subscribed(topic)
    except TopicNotFound:
        raise SnsError("NotFound", "Subscription does not exist") from None
    # A queue's subscription's ARN ends with its name, a push's with its id.
    found = subscribed.get(queue_of_end(topic, last))
    if found is None or found.push is not None:
        found = subscribed.webhook(last)
    if found is None:
        raise SnsError("NotFound", "Subscription does not exist")
    return topic, found


def _arn_end(topic: str, subscription: SubscriptionView) -> str:
    """What a subscription's ARN ends with: its queue's name (in full, ``/`` for ``:``,
    if the queue is of another application), or a push subscription's id."""
    if subscription.push is not None:
        return subscription.push.id
    return queue_end(topic, subscription.queue)


def queue_end(topic: str, queue: str) -> str:
    """The end of the ARN of ``topic``'s subscription of ``queue``: the queue's name in
    the topic's application; else its full name, ``/`` for ``:`` (a queue without an
    application: ``/`` and its name). Queue names have no ``/``."""
    own = _application_of(topic)
    if queue.startswith(own) and (own or SEPARATOR not in queue):
        return queue[len(own) :]
    return queue.replace(SEPARATOR, "/") if SEPARATOR in queue else f"/{queue}"


def queue_of_end(topic: str, end: str) -> str:
    """The queue a subscription's ARN of ``topic`` ends with (``queue_end``'s inverse)."""
    if end.startswith("/"):
        return end[1:]
    if "/" in end:
        return end.replace("/", SEPARATOR)
    return _application_of(topic) + end


def _application_of(name: str) -> str:
    """The application a full name starts with, with its separator ("" for none)."""
    application, found, _ = name.partition(SEPARATOR)
    return application + SEPARATOR if found else ""


async def delete_topic(call: Call) -> dict[str, Any]:
    with contextlib.suppress(TopicNotFound):  # deleting no topic is no error
        await call.node.delete_topic(named_topic(call))
    return {}


async def list_topics(call: Call) -> dict[str, Any]:
    call.listing()
    names = sorted(call.visible(call.node.topic_names()))
    page, token = _page(names, call.params.optional_text("NextToken"))
    return {"Topics": [{"TopicArn": call.topic_arn(n)} for n in page], **token}


def _page(names: list[str], after: str | None) -> tuple[list[str], dict[str, str]]:
    rest = [n for n in names if after is None or n > after]
    page = rest[:PAGE]
    return page, {"NextToken": page[-1]} if len(rest) > PAGE else {}


async def subscribe(call: Call) -> dict[str, Any]:
    topic = named_topic(call)
    protocol = call.params.text("Protocol")
    if protocol not in ("sqs", *PROTOCOLS, *UNSERVED_PROTOCOLS):
        raise invalid_parameter(f"Amazon SNS does not support this protocol string: {protocol}")
    if protocol in UNSERVED_PROTOCOLS:
        raise invalid_parameter("Protocol: only sqs, http and https endpoints are delivered to")
    given = call.params.mapping("Attributes")
    known = SUBSCRIPTION_ATTRIBUTES | (PUSH_ATTRIBUTES if protocol in PROTOCOLS else set())
    for name in set(given) - known:
        raise invalid_parameter(f"Attributes Reason: Unknown attribute {name}")
    if protocol in PROTOCOLS:
        settings = _subscription_settings(given, None, "Attributes Reason: ")
        return await subscribe_endpoint(call, topic, protocol, settings)
    endpoint = call.params.text("Endpoint")
    if not endpoint.startswith("arn:aws:sqs:") or len(endpoint.split(":")) != 6:
        raise invalid_parameter("SQS endpoint ARN")
    queue = call.name_of_arn(endpoint, "Endpoint")
    if queue.endswith(".fifo") and not topic.endswith(".fifo"):
        raise invalid_parameter(
            "Invalid parameter: Endpoint Reason: "
            "FIFO SQS Queues can not be subscribed to standard SNS topics"
        )
    current = call.node.subscribed(topic).get(queue)
    settings = _subscription_settings(given, current, "Attributes Reason: ")
    if current is not None and settings != _subscription_settings({}, current):
        # as SNS: a subscription is made once; asking it again otherwise is refused
        raise invalid_parameter(
            "Attributes Reason: Subscription already exists with different attributes"
        )
    text = given.get("ReplayPolicy")
    asked = None if text is None else replay_asked(call, topic, text)
    await _subscribe(call, topic, queue, settings, "Attributes Reason: ")
    if asked is not None:
        await replay(call, topic, queue, asked)
    return {"SubscriptionArn": f"{call.topic_arn(topic)}:{queue_end(topic, queue)}"}


async def _subscribe(
    call: Call, topic: str, queue: str, settings: dict[str, Any], said: str = ""
) -> None:
    """Subscribe, a filter policy held to SNS's shape; a refused one in SNS's words
    (``Subscribe``'s say ``said`` first)."""
    try:
        # As SNS, a queue that does not exist yet may be subscribed: it gets what is
        # published once it does (until then its copies are counted as failed).
        await call.node.subscribe(topic, queue, strict=True, missing_ok=True, **settings)
    except Invalid as refused:
        if refused.field == "filter_scope":  # nesting where the scope has none
            raise invalid_parameter(f"{said}{refused}") from None
        if refused.field == "filter":
            raise invalid_parameter(f"{said}FilterPolicy: {refused}") from None
        raise


def _subscription_settings(
    given: dict[str, Any], current: SubscriptionView | None, said: str = ""
) -> dict[str, Any]:
    """What ``Node.subscribe`` is given for SNS's subscription attributes (a refusal
    worded after ``said``, as ``Subscribe``'s are)."""
    policy: object = None if current is None else current.filter
    scope: str = "attributes" if current is None else current.filter_scope
    if "FilterPolicyScope" in given:
        named = given["FilterPolicyScope"]
        if named not in SCOPES:
            raise invalid_parameter(
                f"FilterPolicyScope: Invalid value [{named}]. "
                "Please use either MessageBody or MessageAttributes"
            )
        scope = SCOPES[named]
    if "FilterPolicy" in given:
        text = given["FilterPolicy"]
        try:
            policy = json.loads(text) if text else None
        except (TypeError, ValueError, RecursionError):
            raise invalid_parameter("FilterPolicy: failed to parse JSON") from None
        if policy == {}:
            policy = None  # an empty policy takes everything
    raw = given.get("RawMessageDelivery")
    if raw is None:
        envelope = True if current is None else current.envelope
    elif str(raw).lower() in ("true", "false"):
        envelope = str(raw).lower() == "false"
    else:
        raise invalid_parameter(
            f"{said}RawMessageDelivery: Invalid value [{raw}]. Must be true or false."
        )
    pattern = None if current is None else current.pattern
    return {
        "pattern": pattern,
        "filter_policy": policy,
        "filter_scope": scope,
        "envelope": envelope,
    }


async def unsubscribe(call: Call) -> dict[str, Any]:
    topic, found = _subscription(call)
    if found.push is not None:
        await webhooks_of(call).unsubscribe(found.push.id)
    else:
        await call.node.unsubscribe(topic, found.queue)
    return {}


async def get_subscription_attributes(call: Call) -> dict[str, Any]:
    topic, found = _subscription(call)
    attributes = {
        **_listed(call, topic, found),
        "Owner": call.owner(topic),
        "RawMessageDelivery": str(not found.envelope).lower(),
        "PendingConfirmation": "false",
        "ConfirmationWasAuthenticated": "true",
    }
    if found.push is not None:
        attributes.update(push_attributes(call, topic, found.push))
    if found.filter is not None:
        attributes["FilterPolicy"] = json.dumps(found.filter)
        attributes["FilterPolicyScope"] = SCOPE_NAMES[found.filter_scope]
    if found.push is None and topic.endswith(".fifo"):
        attributes.update(
            replay_attributes(await call.node.moves.replay_status(topic, found.queue))
        )
    return {"Attributes": attributes}


async def set_subscription_attributes(call: Call) -> dict[str, Any]:
    topic, found = _subscription(call)
    name = call.params.text("AttributeName")
    value = call.params.optional_text("AttributeValue") or ""
    if found.push is not None and name in PUSH_ATTRIBUTES:
        await configure_push(call, found, name, value)
        return {}
    if name not in SUBSCRIPTION_ATTRIBUTES:
        raise invalid_parameter(f"AttributeName: {name}")
    if name == "ReplayPolicy":
        await replay(call, topic, found.queue, replay_asked(call, topic, value))
        return {}
    settings = _subscription_settings({name: value}, found)
    await _subscribe(call, topic, found.queue, settings)
    return {}


def _listed(call: Call, topic: str, subscription: SubscriptionView) -> dict[str, str]:
    if subscription.push is not None:
        return push_listed(call, topic, subscription.push)
    return {
        "SubscriptionArn": f"{call.topic_arn(topic)}:{queue_end(topic, subscription.queue)}",
        "TopicArn": call.topic_arn(topic),
        "Protocol": "sqs",
        "Endpoint": call.queue_arn(subscription.queue),
    }


async def list_subscriptions(call: Call) -> dict[str, Any]:
    call.listing()
    every = [
        (f"{topic}:{_arn_end(topic, s)}", topic, s)
        for topic in call.visible(call.node.topic_names())
        for s in call.node.subscriptions(topic)
    ]
    return _subscriptions_page(call, every)


async def list_subscriptions_by_topic(call: Call) -> dict[str, Any]:
    """A page of a topic's subscriptions in its own order, by queue (SNS promises no
    order): a page of a wide topic costs the page alone."""
    topic = named_topic(call)
    after = call.params.optional_text("NextToken") or ""
    page, last = call.node.subscribed(topic).page(after, PAGE)
    listed = [{**_listed(call, topic, s), "Owner": call.owner(topic)} for s in page]
    return {"Subscriptions": listed, **({"NextToken": last} if last else {})}


def _subscriptions_page(
    call: Call, every: list[tuple[str, str, SubscriptionView]]
) -> dict[str, Any]:
    by_key = {key: (topic, s) for key, topic, s in every}
    page, token = _page(sorted(by_key), call.params.optional_text("NextToken"))
    listed = [{**_listed(call, *by_key[key]), "Owner": call.owner(by_key[key][0])} for key in page]
    return {"Subscriptions": listed, **token}


# -- publishing ------------------------------------------------------------------------


def _message(call: Call, topic: str, entry: Params) -> tuple[Outgoing, Notice]:
    body = entry.text("Message")
    if not body:
        raise invalid_parameter("Empty message")
    body = valid_body(body)
    if entry.optional_text("MessageStructure") == "json":
        try:
            structured = json.loads(body)
        except ValueError:
            raise invalid_parameter(
                "Message Structure - JSON message body failed to parse"
            ) from None
        if not isinstance(structured, dict) or not isinstance(structured.get("default"), str):
            raise invalid_parameter("Message Structure - No default entry in JSON message body")
        body = str(structured.get("sqs", structured["default"]))
    attributes = sns_attributes(entry.data.get("MessageAttributes"))
    if message_size(body, attributes) > MAX_SNS_MESSAGE_BYTES:
        raise invalid_parameter("Message too long")
    group = entry.optional_text("MessageGroupId")
    if group is not None and not TOKEN.fullmatch(group):
        raise invalid_parameter(
            "MessageGroupId Reason: MessageGroupId can only include alphanumeric and "
            "punctuation characters. 1 to 128 in length."
        )
    fifo = topic.endswith(".fifo")  # a standard topic's group names a tenant (fair queues)
    kept = (call.node.topic_settings(topic).sns_attributes or {}) if fifo else None
    scope = None  # a FIFO topic's: deduplicated in the topic, or (high throughput) the group
    if kept is not None:
        scope = "group" if kept.get("FifoThroughputScope") == "MessageGroup" else "queue"
    outgoing = Outgoing(
        body.encode(),
        attributes=attributes.kept or None,
        dedup_id=_dedup_id(entry, body, group, kept),
        group=group if fifo else None,
        attribute_types=attributes.types or None,
        tenant=None if fifo else group,
        dedup_scope=scope,
    )
    return outgoing, Notice.new(_subject(entry.optional_text("Subject")))


def _subject(subject: str | None) -> str | None:
    """A notification's subject as SNS takes it: 1 to 99 characters, no line break or
    control character."""
    if subject is not None and not (0 < len(subject) < MAX_SUBJECT and subject.isprintable()):
        raise invalid_parameter("Subject")
    return subject


def _dedup_id(
    entry: Params, body: str, group: str | None, kept: dict[str, str] | None
) -> str | None:
    """A message's deduplication id: a FIFO topic's (``kept``: its attributes), given or
    its body's SHA-256 (with ``ContentBasedDeduplication``); a standard topic (``kept``
    None) takes none. Every copy carries it, so each subscribed queue stores a
    message once within its window."""
    given = entry.optional_text("MessageDeduplicationId")
    if kept is None:
        if given is not None:
            raise invalid_parameter(
                "MessageDeduplicationId Reason: The request includes MessageDeduplicationId "
                "parameter that is not valid for this topic type"
            )
        return None
    if group is None:
        raise invalid_parameter("The MessageGroupId parameter is required for FIFO topics")
    if given is not None:
        return given
    if kept.get("ContentBasedDeduplication") != "true":
        raise invalid_parameter(
            "The topic should either have ContentBasedDeduplication enabled or "
            "MessageDeduplicationId provided explicitly"
        )
    return hashlib.sha256(body.encode()).hexdigest()


async def publish(call: Call) -> dict[str, Any]:
    arn = call.params.optional_text("TopicArn") or call.params.optional_text("TargetArn")
    if arn is None:
        raise invalid_parameter("TopicArn or TargetArn Reason: no value for required parameter")
    resource = arn.split(":", 5)[5:]
    if resource and resource[0].startswith("endpoint/"):  # a mobile endpoint
        raise invalid_parameter("TargetArn Reason: No endpoint found for the target arn specified")
    topic = call.topic_of_arn(arn, "TopicArn")
    outgoing, notice = _message(call, topic, call.params)
    await call.node.publish_topic(topic, [outgoing], [notice])
    return {"MessageId": notice.message_id}


async def publish_batch(call: Call) -> dict[str, Any]:
    topic = named_topic(call)
    entries = batch_entries(
        call.params, "PublishBatchRequestEntry", "PublishBatchRequestEntries", SNS_BATCHES
    )
    check_batch(entries)
    ok, failed = checked_entries(entries, lambda entry: _message(call, topic, entry), sns_error)
    if ok:
        messages = [message for _, (message, _) in ok]
        await call.node.publish_topic(topic, messages, [notice for _, (_, notice) in ok])
    successful = [{"Id": entry_id, "MessageId": n.message_id} for entry_id, (_, n) in ok]
    return {"Successful": successful, "Failed": failed}


TOPIC_ACTIONS: dict[str, Action] = {
    "DeleteTopic": delete_topic,
    "ListTopics": list_topics,
    "Subscribe": subscribe,
    "ConfirmSubscription": confirm_subscription,
    "Unsubscribe": unsubscribe,
    "GetSubscriptionAttributes": get_subscription_attributes,
    "SetSubscriptionAttributes": set_subscription_attributes,
    "ListSubscriptions": list_subscriptions,
    "ListSubscriptionsByTopic": list_subscriptions_by_topic,
    "Publish": publish,
    "PublishBatch": publish_batch,
}
