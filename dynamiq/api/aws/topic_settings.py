"""SNS's actions on what a topic keeps: its attributes, tags and policy.

``CreateTopic`` takes attributes and tags (creating an existing topic with
other ones is refused, as SNS does); ``Get``/``SetTopicAttributes`` keep and
show what SNS clients set (``DisplayName``, ``Policy``, ``DeliveryPolicy``,
``KmsMasterKeyId``, ``SignatureVersion``, ``TracingConfig``,
``ContentBasedDeduplication``, ``FifoThroughputScope`` and ``ArchivePolicy`` on
a FIFO topic, ``archive``) with the counts and SNS's defaults;
``AddPermission``/``RemovePermission`` edit the stored policy (SNS's default
one until then), which ``Call`` evaluates.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dynamiq.api.aws.archive import archive_days
from dynamiq.api.aws.call import Action, Call
from dynamiq.api.aws.errors import AwsError, SnsError, invalid_parameter
from dynamiq.api.aws.policies import (
    one_or_many,
    permission_asked,
    policy_document,
    statements_of,
)
from dynamiq.api.aws.topics import named_topic
from dynamiq.api.bodies import iso_time
from dynamiq.errors import Invalid, TopicExists, TopicNotFound
from dynamiq.models.topics import MAX_TOPIC_TAGS, TopicSettings
from dynamiq.push.policy import effective_topic_policy, topic_policy

__all__ = ["TOPIC_SETTING_ACTIONS"]

TOPIC_NAME = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
FIFO_SUFFIX = ".fifo"
KEPT = frozenset(
    {
        "DisplayName",
        "Policy",
        "DeliveryPolicy",
        "KmsMasterKeyId",
        "SignatureVersion",
        "TracingConfig",
        "ContentBasedDeduplication",
        "FifoThroughputScope",
        "ArchivePolicy",
    }
)
FIFO_ONLY = frozenset({"ContentBasedDeduplication", "FifoThroughputScope", "ArchivePolicy"})
_CHOICES = {
    "SignatureVersion": ("1", "2"),
    "TracingConfig": ("PassThrough", "Active"),
    "ContentBasedDeduplication": ("true", "false"),
    "FifoThroughputScope": ("Topic", "MessageGroup"),
}
_TOPIC_ACTIONS = (
    "GetTopicAttributes",
    "SetTopicAttributes",
    "AddPermission",
    "RemovePermission",
    "DeleteTopic",
    "Subscribe",
    "ListSubscriptionsByTopic",
    "Publish",
)


def _attribute(name: str, value: object, fifo: bool) -> str:
    """A topic attribute's value, checked (SNS's refusal otherwise)."""
    if name not in KEPT or (name in FIFO_ONLY and not fifo):
        raise invalid_parameter("AttributeName")
    text = "" if value is None else str(value)
    if name in _CHOICES and text not in _CHOICES[name]:
        raise invalid_parameter(f"{name}: must be one of {', '.join(_CHOICES[name])}")
    if name == "Policy" and text:
        try:
            policy_document(name, text)
        except AwsError as refused:
            raise invalid_parameter(f"Policy: {refused.message}") from None
    if name == "ArchivePolicy":
        return text if archive_days(text) else ""  # {} keeps nothing: not kept
    if name == "DeliveryPolicy" and text:
        try:
            topic_policy(text)
        except Invalid as refused:
            raise invalid_parameter(f"DeliveryPolicy: {refused}") from None
    return text


def _tags(given: object) -> dict[str, str]:
    """SNS's ``Tags``: a list of ``Key``/``Value`` pairs, each key once."""
    if given is None:
        return {}
    if not isinstance(given, list) or not all(isinstance(t, dict) for t in given):
        raise invalid_parameter("Tags")
    tags: dict[str, str] = {}
    for tag in given:
        key, value = tag.get("Key"), tag.get("Value", "")
        if not isinstance(key, str) or not 0 < len(key) <= 128:
            raise invalid_parameter("Tags Reason: a tag key is 1 to 128 characters")
        if not isinstance(value, str) or len(value) > 256:
            raise invalid_parameter("Tags Reason: a tag value is at most 256 characters")
        if key in tags:
            raise invalid_parameter("Duplicated keys are not allowed.")
        tags[key] = value
    return tags


def _checked_tags(tags: dict[str, str]) -> dict[str, str] | None:
    if len(tags) > MAX_TOPIC_TAGS:
        raise SnsError(
            "TagLimitExceeded", "Could not complete request: tag quota of per resource exceeded"
        )
    return tags or None


async def create_topic(call: Call) -> dict[str, Any]:
    name = call.params.text("Name")
    given = call.params.mapping("Attributes")
    fifo = given.get("FifoTopic", "false") == "true"
    base = name.removesuffix(FIFO_SUFFIX) if fifo else name
    if fifo != name.endswith(FIFO_SUFFIX) or not TOPIC_NAME.fullmatch(base):
        raise invalid_parameter("Topic Name")
    attributes = {k: _attribute(k, v, fifo) for k, v in given.items() if k != "FifoTopic"}
    tags = _tags(call.params.data.get("Tags"))
    name = call.own(name)
    settings = TopicSettings(
        {k: v for k, v in attributes.items() if v} or None, _checked_tags(tags)
    )
    try:
        await call.node.create_topic(name, settings)
        if attributes.get("ArchivePolicy"):
            await call.node.moves.archive_topic(name, archive_days(attributes["ArchivePolicy"]))
    except TopicExists:  # SNS answers the same ARN, unless asked for other settings
        kept = call.node.topic_settings(name)
        kept_attributes = kept.sns_attributes or {}
        if any(kept_attributes.get(k, "") != v for k, v in attributes.items()):
            raise invalid_parameter(
                "Attributes Reason: Topic already exists with different attributes"
            ) from None
        if tags and tags != (kept.tags or {}):
            raise invalid_parameter(
                "Tags Reason: Topic already exists with different tags"
            ) from None
    return {"TopicArn": call.topic_arn(name)}


def _default_policy(arn: str, account: str) -> dict[str, Any]:
    return {
        "Version": "2008-10-17",
        "Id": "__default_policy_ID",
        "Statement": [
            {
                "Sid": "__default_statement_ID",
                "Effect": "Allow",
                "Principal": {"AWS": "*"},
                "Action": [f"SNS:{action}" for action in _TOPIC_ACTIONS],
                "Resource": arn,
                "Condition": {"StringEquals": {"AWS:SourceOwner": account}},
            }
        ],
    }


def _policy(call: Call, topic: str, kept: dict[str, str]) -> str:
    """The topic's policy: the one set, else SNS's default."""
    default = _default_policy(call.topic_arn(topic), call.owner(topic))
    return kept.get("Policy") or json.dumps(default, separators=(",", ":"))


def _effective_delivery_policy(kept: dict[str, str]) -> str:
    """SNS's defaults for HTTP/S deliveries, with what the topic's policy sets."""
    given = json.loads(kept["DeliveryPolicy"]) if "DeliveryPolicy" in kept else {}
    try:
        return json.dumps(effective_topic_policy(given), separators=(",", ":"))
    except Invalid:  # kept before today's checks: shown as it was set
        return json.dumps(given, separators=(",", ":"))


async def get_topic_attributes(call: Call) -> dict[str, Any]:
    topic = named_topic(call)
    kept = call.node.topic_settings(topic).sns_attributes or {}
    fifo = topic.endswith(FIFO_SUFFIX)
    subscriptions = call.node.subscriptions(topic)
    pending = sum(1 for s in subscriptions if s.push is not None and s.push.state == "pending")
    attributes = {
        "TopicArn": call.topic_arn(topic),
        "Owner": call.owner(topic),
        "DisplayName": "",
        **kept,
        "Policy": _policy(call, topic, kept),
        "EffectiveDeliveryPolicy": _effective_delivery_policy(kept),
        "SubscriptionsConfirmed": str(len(subscriptions) - pending),
        "SubscriptionsPending": str(pending),
        "SubscriptionsDeleted": "0",
    }
    if fifo:
        attributes["FifoTopic"] = "true"
        attributes.setdefault("ContentBasedDeduplication", "false")
        beginning = call.node.moves.archive_beginning_ms(topic)
        if beginning is not None:
            attributes["BeginningArchiveTime"] = iso_time(beginning)
    return {"Attributes": attributes}


async def _set_attributes(call: Call, topic: str, changes: dict[str, str]) -> None:
    current = call.node.topic_settings(topic)
    kept = {**(current.sns_attributes or {}), **changes}
    kept = {k: v for k, v in kept.items() if v}
    await call.node.configure_topic(topic, TopicSettings(kept or None, current.tags))


async def set_topic_attributes(call: Call) -> dict[str, Any]:
    topic = named_topic(call)
    name = call.params.text("AttributeName")
    value = _attribute(name, call.params.optional_text("AttributeValue"), topic.endswith(".fifo"))
    kept = call.node.topic_settings(topic).sns_attributes or {}
    if name == "FifoThroughputScope" and kept.get(name) == "MessageGroup" and value != kept[name]:
        # SNS's one-way switch: deduplication narrowed to groups is never widened again
        raise invalid_parameter(
            "FifoThroughputScope: a topic's scope cannot change from MessageGroup to Topic"
        )
    if name == "ArchivePolicy":
        await call.node.moves.archive_topic(topic, archive_days(value))
    await _set_attributes(call, topic, {name: value})
    return {}


def _tagged(call: Call) -> tuple[str, TopicSettings]:
    """The topic a ``ResourceArn`` names, and its settings."""
    try:
        topic = call.topic_of_arn(call.params.text("ResourceArn"), "ResourceArn")
        return topic, call.node.topic_settings(topic)
    except TopicNotFound:
        raise SnsError("ResourceNotFound", "Resource does not exist") from None


async def tag_resource(call: Call) -> dict[str, Any]:
    topic, current = _tagged(call)
    tags = {**(current.tags or {}), **_tags(call.params.data.get("Tags"))}
    await call.node.configure_topic(
        topic, TopicSettings(current.sns_attributes, _checked_tags(tags))
    )
    return {}


async def untag_resource(call: Call) -> dict[str, Any]:
    topic, current = _tagged(call)
    gone = set(call.params.strings("TagKeys"))
    tags = {k: v for k, v in (current.tags or {}).items() if k not in gone}
    await call.node.configure_topic(topic, TopicSettings(current.sns_attributes, tags or None))
    return {}


async def list_tags_for_resource(call: Call) -> dict[str, Any]:
    _, current = _tagged(call)
    return {"Tags": [{"Key": k, "Value": v} for k, v in sorted((current.tags or {}).items())]}


async def add_permission(call: Call) -> dict[str, Any]:
    topic = named_topic(call)
    label, accounts, actions = permission_asked(call.params, "AWSAccountId", "ActionName")
    if any(action not in _TOPIC_ACTIONS for action in actions):
        raise invalid_parameter("Policy statement action out of service scope!")
    kept = call.node.topic_settings(topic).sns_attributes or {}
    document, statements = statements_of(_policy(call, topic, kept))
    if any(s.get("Sid") == label for s in statements):
        raise invalid_parameter("Statement already exists")
    statement = {
        "Sid": label,
        "Effect": "Allow",
        "Principal": {"AWS": one_or_many([f"arn:aws:iam::{a}:root" for a in accounts])},
        "Action": one_or_many([f"SNS:{a}" for a in actions]),
        "Resource": call.topic_arn(topic),
    }
    policy = {**document, "Statement": [*statements, statement]}
    await _set_attributes(call, topic, {"Policy": json.dumps(policy, separators=(",", ":"))})
    return {}


async def remove_permission(call: Call) -> dict[str, Any]:
    topic = named_topic(call)
    label = call.params.text("Label")
    kept = call.node.topic_settings(topic).sns_attributes or {}
    document, statements = statements_of(_policy(call, topic, kept))
    left = [s for s in statements if s.get("Sid") != label]
    policy = json.dumps({**document, "Statement": left}, separators=(",", ":"))
    await _set_attributes(call, topic, {"Policy": policy})
    return {}


TOPIC_SETTING_ACTIONS: dict[str, Action] = {
    "CreateTopic": create_topic,
    "GetTopicAttributes": get_topic_attributes,
    "SetTopicAttributes": set_topic_attributes,
    "TagResource": tag_resource,
    "UntagResource": untag_resource,
    "ListTagsForResource": list_tags_for_resource,
    "AddPermission": add_permission,
    "RemovePermission": remove_permission,
}
