"""SQS's queue actions, and its queue attributes as Dynamiq's queue settings.

| SQS attribute | setting |
| --- | --- |
| VisibilityTimeout | visibility_timeout |
| DelaySeconds | delay_seconds |
| MessageRetentionPeriod | retention_seconds |
| ReceiveMessageWaitTimeSeconds | receive_wait_seconds |
| MaximumMessageSize | max_message_bytes |
| RedrivePolicy | dead_letter_queue, max_receives |
| FifoQueue | fifo |
| ContentBasedDeduplication | content_dedup |
| DeduplicationScope | dedup_scope |
| Policy, RedriveAllowPolicy, KMS, SSE, FifoThroughputLimit | sqs_attributes (kept) |

A queue created here gets SQS's defaults where Dynamiq's differ (messages
kept four days); its messages may be as large as the node's
``limits.maxmessagebytes`` (1 MiB, SQS's own limit) unless it says less.
One created through another API keeps its own settings, and shows them here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from dynamiq.api.aws.call import Action, Call
from dynamiq.api.aws.errors import AwsError
from dynamiq.api.aws.policies import bad_value, policy_document, redrive_allow_policy
from dynamiq.errors import Invalid, QueueExists, QueueNotFound
from dynamiq.models import QueueRecord, QueueSettings
from dynamiq.service.reports import QueueStatsDetail

__all__ = ["QUEUE_ACTIONS"]

DEFAULT_RETENTION = 345_600
FIFO_SUFFIX = ".fifo"
QUEUE_NAME = re.compile(r"^(?=.{1,80}$)[A-Za-z0-9_-]+(\.fifo)?$")
READ_ONLY = frozenset(
    {
        "QueueArn",
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
        "CreatedTimestamp",
        "LastModifiedTimestamp",
    }
)


def _integer(lo: int, hi: int) -> Callable[[str, object], int]:
    def parse(name: str, value: object) -> int:
        text = str(value)
        if not text.isdigit() or not lo <= int(text) <= hi:
            raise bad_value(name, f"must be an integer from {lo} to {hi}")
        return int(text)

    return parse


def _boolean(name: str, value: object) -> bool:
    text = str(value).lower()
    if text not in ("true", "false"):
        raise bad_value(name, "must be true or false")
    return text == "true"


def _choice(*allowed: str) -> Callable[[str, object], str]:
    def parse(name: str, value: object) -> str:
        if value not in allowed:
            raise bad_value(name, f"must be one of {', '.join(allowed)}")
        return str(value)

    return parse


def _text(name: str, value: object) -> str:
    return str(value)


def _as_text(parse: Callable[[str, object], Any]) -> Callable[[str, object], str]:
    def text(name: str, value: object) -> str:
        parsed = parse(name, value)
        return str(parsed).lower() if isinstance(parsed, bool) else str(parsed)

    return text


_SCOPES = {"queue": "queue", "messageGroup": "group"}

# attribute: (setting, parser)
_SIMPLE: dict[str, tuple[str, Callable[[str, object], Any]]] = {
    "VisibilityTimeout": ("visibility_timeout", _integer(0, 43_200)),
    "DelaySeconds": ("delay_seconds", _integer(0, 900)),
    "MessageRetentionPeriod": ("retention_seconds", _integer(60, 1_209_600)),
    "ReceiveMessageWaitTimeSeconds": ("receive_wait_seconds", _integer(0, 20)),
    "MaximumMessageSize": ("max_message_bytes", _integer(1024, 1_048_576)),
    "ContentBasedDeduplication": ("content_dedup", _boolean),
    "DeduplicationScope": ("dedup_scope", lambda n, v: _SCOPES[_choice(*_SCOPES)(n, v)]),
}
# Attributes kept as SQS clients set them and not acted on (no IAM evaluation, no
# server-side keys): ``sqs_attributes``. An empty text removes one.
_KEPT: dict[str, Callable[[str, object], str]] = {
    "Policy": policy_document,
    "RedriveAllowPolicy": redrive_allow_policy,
    "KmsMasterKeyId": _text,
    "KmsDataKeyReusePeriodSeconds": _as_text(_integer(60, 86_400)),
    "SqsManagedSseEnabled": _as_text(_boolean),
    "FifoThroughputLimit": _choice("perQueue", "perMessageGroupId"),
}
_FIFO_ONLY = frozenset({"DeduplicationScope", "FifoThroughputLimit"})


KNOWN = READ_ONLY | _SIMPLE.keys() | _KEPT.keys() | {"RedrivePolicy", "FifoQueue", "All"}


def settings_of(
    call: Call, attributes: dict[str, Any], fifo: bool, current: QueueSettings, queue: str
) -> dict[str, Any]:
    """The setting changes SQS attributes ask of the queue ``queue`` whose settings are
    ``current`` (a new queue's: the defaults)."""
    changes: dict[str, Any] = {}
    kept = dict(current.sqs_attributes or {})
    for name, value in attributes.items():
        if name in _FIFO_ONLY and not fifo:
            raise AwsError(
                "InvalidAttributeName",
                f"You can specify the {name} only when FifoQueue is set to true.",
            )
        if name in _SIMPLE:
            setting, parse = _SIMPLE[name]
            changes[setting] = parse(name, value)
        elif name in _KEPT:
            if value == "":
                kept.pop(name, None)
            else:
                kept[name] = _KEPT[name](name, value)
        elif name == "RedrivePolicy":
            changes.update(_redrive_policy(call, value, fifo, queue))
        elif name != "FifoQueue":
            raise AwsError("InvalidAttributeName", f"Unknown Attribute {name}.")
    if "content_dedup" in changes and not fifo:
        raise AwsError("InvalidAttributeName", "Unknown Attribute ContentBasedDeduplication.")
    if kept != (current.sqs_attributes or {}):
        changes["sqs_attributes"] = kept or None
    scope = changes.get("dedup_scope", current.dedup_scope)
    if kept.get("FifoThroughputLimit") == "perMessageGroupId" and scope != "group":
        raise bad_value(
            "FifoThroughputLimit",
            "perMessageGroupId is allowed only when DeduplicationScope is messageGroup",
        )
    return changes


def _redrive_policy(call: Call, value: object, fifo: bool, source: str) -> dict[str, Any]:
    if value in ("", None, "{}"):
        return {"dead_letter_queue": None, "max_receives": None}
    try:
        policy = json.loads(str(value))
        target = call.name_of_arn(policy["deadLetterTargetArn"], "deadLetterTargetArn")
        receives = int(policy["maxReceiveCount"])
    except (ValueError, TypeError, KeyError):
        raise bad_value(
            "RedrivePolicy", "needs deadLetterTargetArn and an integer maxReceiveCount"
        ) from None
    if not 1 <= receives <= 1000:
        raise bad_value("RedrivePolicy", "maxReceiveCount must be from 1 to 1000")
    if target.endswith(FIFO_SUFFIX) != fifo:  # only a FIFO queue's name ends in .fifo
        raise AwsError(
            "InvalidParameterValue",
            f"Value {value} for parameter RedrivePolicy is invalid. Reason: Dead-letter "
            "target must be the same type of queue as the source queue.",
        )
    _check_redrive_allowed(call, value, source, target)
    return {"dead_letter_queue": target, "max_receives": receives}


def _check_redrive_allowed(call: Call, value: object, source: str, target: str) -> None:
    """Refuse a dead-letter queue of another account, or one whose ``RedriveAllowPolicy``
    does not let ``source`` in (``denyAll``, or ``byQueue`` not naming it), as SQS does."""
    try:
        found = call.node.require_queue(target)
    except QueueNotFound:
        return  # SQS takes a dead-letter queue that does not exist yet
    if call.owner(target) != call.owner(source):
        reason = "Dead-letter target owner is not the same as the source queue owner."
    else:
        allowed = (found.settings.sqs_attributes or {}).get("RedriveAllowPolicy")
        policy = json.loads(allowed) if allowed else {"redrivePermission": "allowAll"}
        permission = policy.get("redrivePermission")
        sources = policy.get("sourceQueueArns", [])
        if permission == "allowAll" or (
            permission == "byQueue" and call.queue_arn(source) in sources
        ):
            return
        reason = "Queue " + call.queue_arn(target) + " does not allow this queue as a source."
    raise AwsError(
        "InvalidParameterValue",
        f"Value {value} for parameter RedrivePolicy is invalid. Reason: {reason}",
    )


def attributes_of(call: Call, record: QueueRecord, stats: QueueStatsDetail) -> dict[str, str]:
    """Every attribute SQS would show of a queue."""
    s = record.settings
    shown = {
        "QueueArn": call.queue_arn(record.name),
        "ApproximateNumberOfMessages": str(stats.visible),
        "ApproximateNumberOfMessagesNotVisible": str(stats.in_flight),
        "ApproximateNumberOfMessagesDelayed": str(stats.delayed),
        "CreatedTimestamp": str(record.created_ms // 1000),
        "LastModifiedTimestamp": str(record.modified_ms // 1000),
        "VisibilityTimeout": str(round(s.visibility_timeout)),
        "MaximumMessageSize": str(call.node.message_limit(s)),
        "DelaySeconds": str(round(s.delay_seconds)),
        "ReceiveMessageWaitTimeSeconds": str(round(s.receive_wait_seconds)),
        "SqsManagedSseEnabled": "false",
        **(s.sqs_attributes or {}),
    }
    if s.retention_seconds is not None:
        shown["MessageRetentionPeriod"] = str(round(s.retention_seconds))
    if s.dead_letter_queue is not None and s.max_receives is not None:
        shown["RedrivePolicy"] = json.dumps(
            {
                "deadLetterTargetArn": call.queue_arn(s.dead_letter_queue),
                "maxReceiveCount": s.max_receives,
            },
            separators=(",", ":"),
        )
    if s.fifo:
        shown["FifoQueue"] = "true"
        shown["ContentBasedDeduplication"] = str(s.content_dedup).lower()
        shown["DeduplicationScope"] = "messageGroup" if s.dedup_scope == "group" else "queue"
        shown.setdefault("FifoThroughputLimit", "perQueue")
    else:
        shown.pop("FifoThroughputLimit", None)
    return shown


# -- actions ----------------------------------------------------------------------------


async def create_queue(call: Call) -> dict[str, Any]:
    name = call.params.text("QueueName")
    attributes = call.params.mapping("Attributes")
    fifo = _boolean("FifoQueue", attributes.get("FifoQueue", "false"))
    if "FifoQueue" in attributes and not fifo:  # a standard queue names no such attribute
        raise AwsError("InvalidAttributeName", "Unknown Attribute FifoQueue.")
    _check_name(name, fifo)
    name = call.own(name)
    changes = {
        "retention_seconds": DEFAULT_RETENTION,
        **settings_of(call, attributes, fifo, QueueSettings(), name),
        "fifo": fifo,
    }
    tags = _tags(call.params.mapping("tags"))
    try:
        await call.node.create_queue(name, {**changes, "tags": tags or None})
    except QueueExists:
        current = call.node.require_queue(name)  # its tags are not compared, as in SQS
        if differing := _differing(current.settings, QueueSettings().updated(changes)):
            raise AwsError(
                "QueueNameExists",
                "A queue already exists with the same name and a different value for "
                f"attribute {differing}",
            ) from None
    except Invalid as exc:
        raise AwsError("InvalidAttributeValue", exc.message) from None
    return {"QueueUrl": call.queue_url(name)}


def _check_name(name: str, fifo: bool) -> None:
    """Refuse a queue name SQS would, in its words (``.fifo`` counts toward the 80)."""
    if fifo and not (name.endswith(FIFO_SUFFIX) and QUEUE_NAME.match(name)):
        raise AwsError(
            "InvalidParameterValue",
            "The name of a FIFO queue can only include alphanumeric characters, hyphens, "
            "or underscores, must end with .fifo suffix and be 1 to 80 in length",
        )
    if not fifo and (name.endswith(FIFO_SUFFIX) or not QUEUE_NAME.match(name)):
        raise AwsError(
            "InvalidParameterValue",
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
        )


def _differing(current: QueueSettings, wanted: QueueSettings) -> str | None:
    """The first SQS attribute (else setting) in which two queues' settings differ; tags
    are not compared, as in SQS."""
    for attribute, (setting, _) in _SIMPLE.items():
        if getattr(current, setting) != getattr(wanted, setting):
            return attribute
    if (current.dead_letter_queue, current.max_receives) != (
        wanted.dead_letter_queue,
        wanted.max_receives,
    ):
        return "RedrivePolicy"
    kept, asked = current.sqs_attributes or {}, wanted.sqs_attributes or {}
    for attribute in sorted(kept.keys() | asked.keys()):
        if kept.get(attribute) != asked.get(attribute):
            return attribute
    for setting in (f.name for f in fields(QueueSettings) if f.name != "tags"):
        if getattr(current, setting) != getattr(wanted, setting):
            return setting
    return None


def _tags(given: dict[str, Any]) -> dict[str, str]:
    if not all(isinstance(v, str) for v in given.values()):
        raise AwsError("InvalidParameterValue", "Tag values must be strings.")
    return given


async def tag_queue(call: Call) -> dict[str, Any]:
    record = call.queue()
    given = _tags(call.params.mapping("Tags"))
    if not given:
        raise AwsError("MissingParameter", "The request must contain the parameter Tags.")
    await _set_tags(call, record, {**(record.settings.tags or {}), **given})
    return {}


async def untag_queue(call: Call) -> dict[str, Any]:
    record = call.queue()
    gone = set(call.params.strings("TagKeys"))
    if not gone:
        raise AwsError("MissingParameter", "The request must contain the parameter TagKeys.")
    tags = {k: v for k, v in (record.settings.tags or {}).items() if k not in gone}
    await _set_tags(call, record, tags)
    return {}


async def _set_tags(call: Call, record: QueueRecord, tags: dict[str, str]) -> None:
    await _configure(call, record, {"tags": tags or None}, "InvalidParameterValue")


async def _configure(call: Call, record: QueueRecord, changes: dict[str, Any], code: str) -> None:
    """Change a queue's settings; a value its settings refuse is SQS's ``code``."""
    try:
        await call.node.configure_queue(record.name, changes)
    except Invalid as exc:
        raise AwsError(code, exc.message) from None


async def list_queue_tags(call: Call) -> dict[str, Any]:
    tags = call.queue().settings.tags
    return {"Tags": tags} if tags else {}


async def get_queue_url(call: Call) -> dict[str, Any]:
    record = call.queue("QueueName")
    return {"QueueUrl": call.queue_url(record.name)}


async def list_queues(call: Call) -> dict[str, Any]:
    prefix = call.params.optional_text("QueueNamePrefix") or ""
    limit = call.params.integer("MaxResults", None, 1, 1000)
    after = call.params.optional_text("NextToken") or ""
    call.listing()
    names = [
        n
        for n in call.visible(call.node.queue_names())
        if call.accounts.address(n)[1].startswith(prefix) and n > after
    ]
    page = names[: limit or 1000]  # without MaxResults: at most 1,000, and no token
    if limit is None and not page:
        return {}
    answer: dict[str, Any] = {"QueueUrls": [call.queue_url(n) for n in page]}
    if limit is not None and len(names) > limit:
        answer["NextToken"] = page[-1]
    return answer


async def delete_queue(call: Call) -> dict[str, Any]:
    await call.node.delete_queue(call.queue().name)
    return {}


async def purge_queue(call: Call) -> dict[str, Any]:
    await call.node.purge_queue(call.queue().name)
    return {}


async def get_queue_attributes(call: Call) -> dict[str, Any]:
    record = call.queue()
    wanted = set(call.params.strings("AttributeNames"))
    if not wanted:
        return {}
    for name in wanted - KNOWN:
        raise AwsError("InvalidAttributeName", f"Unknown Attribute {name}.")
    (stats,) = await call.node.queue_stats([record.name])
    shown = attributes_of(call, record, stats)
    if "All" not in wanted:
        shown = {k: v for k, v in shown.items() if k in wanted}
    return {"Attributes": shown} if shown else {}


async def set_queue_attributes(call: Call) -> dict[str, Any]:
    record = call.queue()
    attributes = call.params.mapping("Attributes")
    for name in attributes.keys() & READ_ONLY:
        raise AwsError("InvalidAttributeName", f"Attribute {name} cannot be changed.")
    fifo = record.settings.fifo
    if "FifoQueue" in attributes:  # a FIFO queue may say so again; nothing else
        wanted = str(attributes["FifoQueue"]).lower()
        if not fifo and wanted == "true":
            raise AwsError("InvalidAttributeName", "Unknown Attribute FifoQueue.")
        if not (fifo and wanted == "true"):
            raise bad_value("FifoQueue", "Modifying queue type is not supported")
    changes = settings_of(call, attributes, fifo, record.settings, record.name)
    await _configure(call, record, changes, "InvalidAttributeValue")
    return {}


async def list_dead_letter_source_queues(call: Call) -> dict[str, Any]:
    record = call.queue()
    sources = call.node.dead_letter_sources(record.name)
    return {"queueUrls": [call.queue_url(n) for n in sources]}


QUEUE_ACTIONS: dict[str, Action] = {
    "CreateQueue": create_queue,
    "GetQueueUrl": get_queue_url,
    "ListQueues": list_queues,
    "DeleteQueue": delete_queue,
    "PurgeQueue": purge_queue,
    "GetQueueAttributes": get_queue_attributes,
    "SetQueueAttributes": set_queue_attributes,
    "ListDeadLetterSourceQueues": list_dead_letter_source_queues,
    "TagQueue": tag_queue,
    "UntagQueue": untag_queue,
    "ListQueueTags": list_queue_tags,
}
