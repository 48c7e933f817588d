"""The v2 JSON bodies, as msgspec structs: decoded, validated and documented from one source.

Message ids travel as decimal strings: they are 63-bit integers, beyond what
JSON numbers carry exactly in many languages. Bodies travel as UTF-8 text
(``"encoding": "utf-8"``) or as base64 (``"encoding": "base64"``) for bytes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from dynamiq.models import (
    ATTRIBUTE_NAME,
    ATTRIBUTE_TYPE,
    MAX_ATTRIBUTES,
    MAX_DEDUP_WINDOW_SECONDS,
    MAX_DELAY_SECONDS,
    MAX_DEPTH_LIMIT,
    MAX_MESSAGE_BYTES,
    MAX_PARTITION_AGE,
    MAX_PARTITIONS_LIMIT,
    MAX_RECEIVES_LIMIT,
    MAX_RETENTION_SECONDS,
    MAX_ROUTING_KEY,
    MAX_VISIBILITY_TIMEOUT,
    MAX_WAIT_SECONDS,
    MIN_EXPIRES_AFTER_SECONDS,
    MIN_MESSAGE_BYTES,
    TOKEN,
    TOKEN_RULE,
    DeadLetterReason,
)

__all__ = [
    "CLEARABLE_SETTINGS",
    "AttributeBytes",
    "AttributesBody",
    "DeadLetterNote",
    "DeleteRequest",
    "DeleteResponse",
    "ErrorBody",
    "OutgoingMessage",
    "PeekResponse",
    "PublishRequest",
    "PublishResponse",
    "QueueInfo",
    "QueueList",
    "QueueSettingsBody",
    "QueueStatsBody",
    "ReceiveRequest",
    "ReceiveResponse",
    "ReceivedMessage",
    "RedriveRequest",
    "RetryBackoffBody",
    "SigningKeyInfo",
    "SubscriptionBody",
    "SubscriptionInfo",
    "TopicInfo",
    "TopicList",
    "TopicPublishResponse",
    "VisibilityRequest",
    "VisibilityResponse",
    "WebhookBody",
    "WebhookChange",
    "WebhookInfo",
    "WebhookList",
]

Encoding = Literal["utf-8", "base64"]
# Checked once, by parse_id (a regex per id in the decoder cost 1.2 us each on
# deletes); the OpenAPI document states the same rule as a pattern.
IdText = Annotated[str, msgspec.Meta(description="a message id: decimal digits, < 2^63")]
Seconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_VISIBILITY_TIMEOUT)]
# A lease: 0 leaves a message received visible again at once.
LeaseSeconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_VISIBILITY_TIMEOUT)]
PartitionCount = Annotated[int, msgspec.Meta(ge=1, le=MAX_PARTITIONS_LIMIT)]
# A node's limits.maxdelayseconds may be lower: the node checks it (422).
DelaySeconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_DELAY_SECONDS)]
LifeSeconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_RETENTION_SECONDS)]
Timestamp = Annotated[str, msgspec.Meta(description="ISO 8601, UTC, milliseconds")]


class _Body(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Base of request bodies: unknown fields are an error, not silently ignored."""


class AttributeBytes(_Body):
    """An attribute value that is bytes, as base64."""

    base64: str


AttributeName = Annotated[
    str, msgspec.Meta(pattern=ATTRIBUTE_NAME.pattern, description="1-128 of A-Z a-z 0-9 _ . -")
]
AttributesBody = Annotated[
    dict[AttributeName, str | int | float | AttributeBytes],
    msgspec.Meta(
        max_length=MAX_ATTRIBUTES,
        description="what the producer attaches: strings, numbers, or bytes as base64; "
        "their size counts toward limits.maxmessagebytes",
    ),
]
AttributeTypes = Annotated[
    dict[AttributeName, Annotated[str, msgspec.Meta(pattern=ATTRIBUTE_TYPE.pattern)]],
    msgspec.Meta(
        max_length=MAX_ATTRIBUTES,
        description="per attribute whose value does not say it, its SQS type: a custom "
        "one (Number.java.lang.Long, String.json, Binary.gif), or Number for a number "
        "kept as written ('1.50')",
    ),
]
Token = Annotated[str, msgspec.Meta(pattern=TOKEN.pattern, description=TOKEN_RULE)]
RoutingKey = Annotated[
    str,
    msgspec.Meta(
        max_length=MAX_ROUTING_KEY,
        description="dot-separated words; a topic's subscription patterns match it",
    ),
]


class OutgoingMessage(_Body):
    """One message to publish."""

    body: str
    encoding: Encoding = "utf-8"
    delay_seconds: DelaySeconds | None = None  # null: the queue's delay_seconds
    ttl_seconds: LifeSeconds | None = None  # null: no expiry of its own
    attributes: AttributesBody | None = None
    routing_key: RoutingKey | None = None
    dedup_id: Token | None = None
    # Delivered in the order they are due, a receive's worth at a time per group and queue.
    group: Token | None = None
    attribute_types: AttributeTypes | None = None


class PublishRequest(_Body):
    """Publish a batch of messages."""

    messages: Annotated[list[OutgoingMessage], msgspec.Meta(min_length=1)]


class PublishResponse(msgspec.Struct, omit_defaults=True):
    """The ids of the published messages, in request order. When any message was a
    duplicate (its dedup id seen within the queue's window: nothing stored, the
    first message's id answered), ``duplicate`` says which."""

    ids: list[str]
    duplicate: list[bool] | None = None


class TopicPublishResponse(msgspec.Struct, omit_defaults=True):
    """Per subscribed queue that took any message, the ids of its copies in request
    order: null for a message its subscription did not take; ``duplicate``, per
    queue where any copy was a duplicate, says which. The copies of a message for
    more than ``limits.syncfanout`` queues arrive shortly after this answer,
    under these ids."""

    ids: dict[str, list[str | None]]
    duplicate: dict[str, list[bool]] | None = None


class ReceiveRequest(_Body):
    """Lease up to ``max_messages`` messages."""

    max_messages: Annotated[int, msgspec.Meta(ge=1)] = 1
    wait_seconds: Annotated[float, msgspec.Meta(ge=0)] | None = None  # None: the queue's
    visibility_timeout: LeaseSeconds | None = None  # None: the queue's
    encoding: Literal["auto", "base64"] = "auto"


class DeadLetterNote(msgspec.Struct):
    """Where a dead-lettered message came from, and why it left."""

    source_queue: str
    reason: DeadLetterReason
    receive_count: int
    dead_lettered_at: Timestamp


class ReceivedMessage(msgspec.Struct, omit_defaults=True):
    """A leased message. With ``encoding: auto`` a body that is valid UTF-8 comes as text.

    ``published_at`` is in epoch milliseconds; ``receive_count`` counts its
    leases, this one included (0 in a peek of a message never received);
    ``dead_letter`` is there only in a dead-letter queue.
    """

    id: str
    body: str
    encoding: Encoding
    published_at: int
    receive_count: int = 0
    first_received_at: Timestamp | None = None
    dead_letter: DeadLetterNote | None = None
    attributes: AttributesBody | None = None
    routing_key: str | None = None
    group: str | None = None
    attribute_types: AttributeTypes | None = None


class ReceiveResponse(msgspec.Struct):
    """The leased messages, oldest first per partition; empty when none was visible."""

    messages: list[ReceivedMessage]


class PeekResponse(msgspec.Struct):
    """One message read without leasing it."""

    message: ReceivedMessage


class DeleteRequest(_Body):
    """Delete messages by id."""

    ids: Annotated[list[IdText], msgspec.Meta(min_length=1)]


class VisibilityRequest(_Body):
    """Extend the leases of ``ids`` to ``visibility_timeout`` seconds from now; 0 ends them."""

    ids: Annotated[list[IdText], msgspec.Meta(min_length=1)]
    visibility_timeout: Annotated[float, msgspec.Meta(ge=0, le=MAX_VISIBILITY_TIMEOUT)]


class VisibilityResponse(msgspec.Struct):
    """Which leases were changed, and which ids held no lease on this node."""

    changed: list[str]
    not_leased: list[str]


class PurgeResponse(msgspec.Struct):
    """How many messages the queue held when it was purged."""

    purged: int


class DeleteResponse(msgspec.Struct):
    """Which ids were deleted and which were not stored."""

    deleted: list[str]
    missing: list[str]


class RetryBackoffBody(_Body):
    """After a lapsed lease, wait ``min(max, initial * multiplier^(receive_count - 1))`` s."""

    initial_seconds: Seconds = 1.0
    multiplier: Annotated[float, msgspec.Meta(ge=1, le=100)] = 2.0
    max_seconds: Seconds = 900.0


class RedriveRequest(_Body):
    """Move a dead-letter queue's messages to ``to`` (default: each one's source queue),
    at most ``max_per_second`` of them a second (default: as fast as the store goes)."""

    to: str | None = None
    max_per_second: Annotated[float, msgspec.Meta(gt=0, le=1e6)] | None = None


class QueueSettingsBody(_Body):
    """A queue's settings; in a create or update request every field is optional.

    ``max_receives``, ``dead_letter_queue``, ``retry_backoff``,
    ``retention_seconds``, ``expires_after_seconds`` and ``max_message_bytes``
    are turned off with null; a missing field is left as is.
    ``receive_wait_seconds`` is how long a receive that names no
    ``wait_seconds`` waits; ``max_message_bytes`` caps a message's body and
    attributes below the node's ``limits.maxmessagebytes``; a ``fifo`` queue
    takes only messages with a ``group`` (SQS's FIFO queues); ``tags`` label the
    queue (SQS's cost-allocation tags); a publish that would take the queue past
    ``max_depth`` messages is refused with 429 ``QUEUE_FULL`` (null: no bound).
    A ``dedup_id`` holds against every message of the queue (``dedup_scope``
    "queue", SQS's default) or only its own group's ("group");
    ``sqs_attributes`` are what SQS clients set and read back: ``Policy`` (the
    queue's resource policy, evaluated for the SQS endpoint's signed callers),
    ``RedriveAllowPolicy``, ``KmsMasterKeyId``...
    """

    visibility_timeout: LeaseSeconds | None = None
    min_partitions: PartitionCount | None = None
    max_partitions: PartitionCount | None = None
    max_partition_age: Annotated[float, msgspec.Meta(gt=0, le=MAX_PARTITION_AGE)] | None = None
    compressed_messages: bool | None = None
    max_receives: (
        Annotated[int, msgspec.Meta(ge=1, le=MAX_RECEIVES_LIMIT)] | msgspec.UnsetType | None
    ) = msgspec.UNSET
    dead_letter_queue: str | msgspec.UnsetType | None = msgspec.UNSET
    retry_backoff: RetryBackoffBody | msgspec.UnsetType | None = msgspec.UNSET
    delay_seconds: DelaySeconds | None = None
    retention_seconds: LifeSeconds | msgspec.UnsetType | None = msgspec.UNSET
    dead_letter_on_expiry: bool | None = None
    dedup_window_seconds: (
        Annotated[float, msgspec.Meta(gt=0, le=MAX_DEDUP_WINDOW_SECONDS)] | None
    ) = None
    content_dedup: bool | None = None
    expires_after_seconds: (
        Annotated[float, msgspec.Meta(ge=MIN_EXPIRES_AFTER_SECONDS, le=MAX_RETENTION_SECONDS)]
        | msgspec.UnsetType
        | None
    ) = msgspec.UNSET
    receive_wait_seconds: Annotated[float, msgspec.Meta(ge=0, le=MAX_WAIT_SECONDS)] | None = None
    max_message_bytes: (
        Annotated[int, msgspec.Meta(ge=MIN_MESSAGE_BYTES, le=MAX_MESSAGE_BYTES)]
        | msgspec.UnsetType
        | None
    ) = msgspec.UNSET
    fifo: bool | None = None
    tags: dict[str, str] | msgspec.UnsetType | None = msgspec.UNSET
    max_depth: Annotated[int, msgspec.Meta(ge=1, le=MAX_DEPTH_LIMIT)] | msgspec.UnsetType | None = (
        msgspec.UNSET
    )
    dedup_scope: Literal["queue", "group"] | None = None
    sqs_attributes: dict[str, str] | msgspec.UnsetType | None = msgspec.UNSET


# Settings a null turns off: those that tell null from absent (UNSET); in the
# others a null is the same as leaving the field out.
CLEARABLE_SETTINGS = frozenset(
    name
    for name, default in zip(
        QueueSettingsBody.__struct_fields__, QueueSettingsBody.__struct_defaults__, strict=True
    )
    if default is msgspec.UNSET
)


class QueueStatsBody(msgspec.Struct):
    """A queue's contents as this node sees them."""

    depth: int
    in_flight: int
    partitions: int


class QueueInfo(msgspec.Struct, omit_defaults=True):
    """A queue: its settings and contents; for a queue with ``expires_after_seconds``,
    when it will be deleted unless it is used before."""

    name: str
    settings: QueueSettingsBody
    stats: QueueStatsBody
    expires_at: Timestamp | None = None


class QueueList(msgspec.Struct, omit_defaults=True):
    """A page of queue names, sorted; ``next``, when more follow, is what ``after``
    takes for the next page."""

    queues: list[str]
    next: str | None = None


class SubscriptionBody(_Body):
    """What a subscription takes of its topic's messages: those whose routing key fits
    ``pattern`` (AMQP topic rules: ``*`` one word, ``#`` zero or more) and that pass
    ``filter`` (SNS's filter policy language) on their attributes, or on their JSON
    body with ``filter_scope`` "body". Neither: everything."""

    pattern: RoutingKey | None = None
    filter: dict[str, Any] | None = None
    filter_scope: Literal["attributes", "body"] = "attributes"


class SubscriptionInfo(msgspec.Struct, omit_defaults=True):
    """A queue's subscription, with its pattern and filter when it has them."""

    queue: str
    pattern: str | None = None
    filter: dict[str, Any] | None = None
    envelope: bool = False  # SNS notifications (a subscription made through SNS)
    filter_scope: str = "attributes"  # what the filter looks at: attributes, or the body


class TopicInfo(msgspec.Struct, omit_defaults=True):
    """A topic and a page of its subscribed queues, sorted, with what each takes;
    ``next``, when more follow, is what ``after`` takes for the next page."""

    name: str
    queues: list[str]
    subscriptions: list[SubscriptionInfo]
    next: str | None = None


class WebhookBody(_Body):
    """A webhook: the topic's messages POSTed to ``url`` (http or https), in SNS's signed
    JSON document or as the bare body (``raw``), those that pass ``filter`` (on the
    attributes, or the JSON body with ``filter_scope`` "body"), retried under
    ``delivery_policy`` (SNS's subscription ``DeliveryPolicy``: ``healthyRetryPolicy``,
    ``throttlePolicy``, ``requestPolicy``) and then moved to ``dead_letter_queue``."""

    url: str
    filter: dict[str, Any] | None = None
    filter_scope: Literal["attributes", "body"] = "attributes"
    raw: bool = False
    delivery_policy: dict[str, Any] | None = None
    dead_letter_queue: str | None = None


class WebhookChange(_Body):
    """What a webhook's change sets (what it leaves out stays; null removes a policy or
    a dead-letter queue)."""

    raw: bool | None = None
    delivery_policy: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET
    dead_letter_queue: str | msgspec.UnsetType | None = msgspec.UNSET


class WebhookInfo(msgspec.Struct):
    """A webhook: where it delivers, whether its endpoint confirmed it (``state``:
    pending, confirmed, or failing when the last delivery this node tried failed), and
    its deliveries waiting (``pending``) and under way (``in_flight``), cluster-wide."""

    id: str
    topic: str
    url: str
    state: str
    raw: bool = False
    filter: dict[str, Any] | None = None
    filter_scope: str = "attributes"
    delivery_policy: dict[str, Any] | None = None
    dead_letter_queue: str | None = None
    pending: int = 0
    in_flight: int = 0


class SigningKeyInfo(msgspec.Struct):
    """The key the cluster signs pushes with: its id and its certificate's URL."""

    key_id: str
    certificate_url: str


class WebhookList(msgspec.Struct):
    """A topic's webhooks, by id."""

    webhooks: list[WebhookInfo]


class TopicList(msgspec.Struct, omit_defaults=True):
    """A page of topic names, sorted; ``next``, when more follow, is what ``after``
    takes for the next page."""

    topics: list[str]
    next: str | None = None


class ErrorBody(msgspec.Struct):
    """Every v2 error: a stable code and a sentence."""

    error: str
    message: str
