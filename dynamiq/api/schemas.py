"""The v2 JSON bodies, as msgspec structs: decoded, validated and documented from one source.

Message ids travel as decimal strings: they are 63-bit integers, beyond what
JSON numbers carry exactly in many languages. Bodies travel as UTF-8 text
(``"encoding": "utf-8"``) or as base64 (``"encoding": "base64"``) for bytes.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

__all__ = [
    "DeleteRequest",
    "DeleteResponse",
    "ErrorBody",
    "Member",
    "NodeStats",
    "OutgoingMessage",
    "PeekResponse",
    "PublishRequest",
    "PublishResponse",
    "QueueInfo",
    "QueueList",
    "QueueSettingsBody",
    "QueueStatsBody",
    "QueueStatsDetail",
    "Rates",
    "ReceiveRequest",
    "ReceiveResponse",
    "ReceivedMessage",
    "Status",
    "TopicInfo",
    "TopicList",
    "TopicPublishResponse",
    "Totals",
    "VisibilityRequest",
    "VisibilityResponse",
]

Encoding = Literal["utf-8", "base64"]
# Checked by the handler (parse_id), once: decimal digits in [0, 2^63-1].
IdText = Annotated[str, msgspec.Meta(description="a message id: decimal digits, < 2^63")]


class _Body(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Base of request bodies: unknown fields are an error, not silently ignored."""


class OutgoingMessage(_Body):
    """One message to publish."""

    body: str
    encoding: Encoding = "utf-8"


class PublishRequest(_Body):
    """Publish a batch of messages."""

    messages: Annotated[list[OutgoingMessage], msgspec.Meta(min_length=1)]


class PublishResponse(msgspec.Struct):
    """The ids of the published messages, in request order."""

    ids: list[str]


class TopicPublishResponse(msgspec.Struct):
    """Per subscribed queue, the ids of its copies, in request order."""

    ids: dict[str, list[str]]


class ReceiveRequest(_Body):
    """Lease up to ``max_messages`` messages."""

    max_messages: Annotated[int, msgspec.Meta(ge=1)] = 1
    wait_seconds: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    visibility_timeout: Annotated[float, msgspec.Meta(gt=0, le=43200)] | None = None
    encoding: Literal["auto", "base64"] = "auto"


class ReceivedMessage(msgspec.Struct):
    """A leased message. With ``encoding: auto`` a body that is valid UTF-8 comes as text."""

    id: str
    body: str
    encoding: Encoding
    published_at: int


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
    visibility_timeout: Annotated[float, msgspec.Meta(ge=0, le=43200)]


class VisibilityResponse(msgspec.Struct):
    """Which leases were changed, and which ids held no lease on this node."""

    changed: list[str]
    not_leased: list[str]


class DeleteResponse(msgspec.Struct):
    """Which ids were deleted and which were not stored."""

    deleted: list[str]
    missing: list[str]


class QueueSettingsBody(_Body):
    """A queue's settings; in a create or update request every field is optional."""

    visibility_timeout: float | None = None
    min_partitions: int | None = None
    max_partitions: int | None = None
    max_partition_age: float | None = None
    compressed_messages: bool | None = None


class QueueStatsBody(msgspec.Struct):
    """A queue's contents as this node sees them."""

    depth: int
    in_flight: int
    partitions: int


class Rates(msgspec.Struct):
    """Messages per second over the last 10 seconds."""

    publish: float
    receive: float
    delete: float


class QueueStatsDetail(msgspec.Struct):
    """A queue's contents and movement; ``oldest_age_seconds`` is null when it is empty."""

    queue: str
    visible: int
    in_flight: int
    depth: int
    oldest_age_seconds: float | None
    rates: Rates
    partitions: int


class Totals(msgspec.Struct):
    """Sums over every queue."""

    visible: int
    in_flight: int
    depth: int
    rates: Rates


class NodeStats(msgspec.Struct):
    """Every queue's stats and their sums."""

    node: str
    members: int
    queues: list[QueueStatsDetail]
    totals: Totals


class Member(msgspec.Struct):
    """A cluster member, its gossip state (online, suspect, offline, left) and its slice.

    The slice is the ids it owns in the live view (decimal strings, inclusive);
    empty for a member that is not live.
    """

    name: str
    http: str
    state: str
    slice: list[str]


class Status(msgspec.Struct):
    """This node, the ids it serves now, and the members it heard of.

    ``serving`` is empty while the node waits for its slice to be handed over.
    """

    node: str
    members: list[Member]
    serving: list[str]


class QueueInfo(msgspec.Struct):
    """A queue: its settings and contents."""

    name: str
    settings: QueueSettingsBody
    stats: QueueStatsBody


class QueueList(msgspec.Struct):
    """Every queue, sorted by name."""

    queues: list[str]


class TopicInfo(msgspec.Struct):
    """A topic and its subscribed queues, sorted."""

    name: str
    queues: list[str]


class TopicList(msgspec.Struct):
    """Every topic, sorted by name."""

    topics: list[str]


class ErrorBody(msgspec.Struct):
    """Every v2 error: a stable code and a sentence."""

    error: str
    message: str
