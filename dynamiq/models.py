"""Frozen value types shared by the server and the client."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal, TypeVar

import msgspec

from dynamiq.attributes import (
    ATTRIBUTE_NAME,
    ATTRIBUTE_TYPE,
    MAX_ATTRIBUTES,
    Attributes,
    AttributeValue,
    attribute_types_size,
    attributes_size,
    natural_type,
)
from dynamiq.errors import Invalid
from dynamiq.keyspace import ID_MAX

__all__ = [
    "APPLICATION_PATTERN",
    "ATTRIBUTE_NAME",
    "ATTRIBUTE_TYPE",
    "EVERY_QUEUE",
    "MAX_ATTRIBUTES",
    "NAME_PATTERN",
    "TOPIC_NAME_PATTERN",
    "AttributeValue",
    "Attributes",
    "DeadLetter",
    "HeldLease",
    "LocalQueueStats",
    "Message",
    "Notice",
    "Outgoing",
    "Published",
    "QueueRecord",
    "QueueSettings",
    "RetryBackoff",
    "attribute_types_size",
    "attributes_size",
    "check_token",
    "natural_type",
    "parse_id",
    "topic_arn",
    "validate_name",
]

# An application (a namespace of queues and topics): 1-40 of a-z 0-9 _ -.
APPLICATION = r"[a-z0-9][a-z0-9_-]{0,39}"
APPLICATION_PATTERN = re.compile(APPLICATION)
# 1-80 characters of A-Z a-z 0-9 _ . -, but not "." or ".." (a URL path cannot carry
# them), after the application's name and ":" for a name in an application.
NAME_PATTERN = re.compile(rf"^(?:{APPLICATION}:)?(?!\.\.?$)[A-Za-z0-9_.-]{{1,80}}$")
# A topic's name may be as long as SNS's: 256 characters and ".fifo".
TOPIC_NAME_PATTERN = re.compile(rf"^(?:{APPLICATION}:)?(?!\.\.?$)[A-Za-z0-9_.-]{{1,261}}$")
MAX_VISIBILITY_TIMEOUT = 12 * 3600.0
MAX_PARTITIONS_LIMIT = 256
MAX_PARTITION_AGE = float(10**9)
MAX_RECEIVES_LIMIT = 1000
MAX_DEPTH_LIMIT = 1_000_000_000  # the largest max_depth a queue may have
MAX_DELAY_SECONDS = 12 * 3600.0  # a node's limits.maxdelayseconds is at most this
MAX_RETENTION_SECONDS = 10 * 365 * 86400.0
MAX_ROUTING_KEY = 255
# A dedup id or a group: 1-128 printable ASCII characters, no spaces (as SQS takes them).
TOKEN = re.compile(r"^[\x21-\x7e]{1,128}$")
TOKEN_RULE = "1-128 printable ASCII characters, no spaces"
MAX_DEDUP_WINDOW_SECONDS = 86400.0
MIN_EXPIRES_AFTER_SECONDS = 60.0
MAX_WAIT_SECONDS = 3600.0  # a node's limits.maxwaitseconds is at most this
MIN_MESSAGE_BYTES, MAX_MESSAGE_BYTES = 1024, 64 << 20
MAX_TAGS, MAX_TAG_KEY = 50, 128
# Queue attributes kept for SQS clients: a policy is at most 20 KiB in SQS.
MAX_SQS_ATTRIBUTES, MAX_SQS_ATTRIBUTE_TEXT = 16, 20_480
# What a dedup id holds against: every message of its queue, or of its group.
DedupScope = Literal["queue", "group"]
DEDUP_SCOPES: tuple[DedupScope, ...] = ("queue", "group")


def _at_most(limit: int) -> str:
    """Return a regular expression matching the decimal numbers from 0 to ``limit``."""
    digits = str(limit)
    shorter = f"[0-9]{{1,{len(digits) - 1}}}" if len(digits) > 1 else None
    same = [
        f"{digits[:i]}[0-{int(d) - 1}][0-9]{{{len(digits) - i - 1}}}"
        for i, d in enumerate(digits)
        if d != "0"
    ]
    return "^(" + "|".join(p for p in (shorter, *same, digits) if p) + ")$"


# What ``parse_id`` accepts, for documents that describe ids (OpenAPI).
ID_PATTERN = _at_most(ID_MAX)


def validate_name(kind: str, name: str, field: str = "name") -> str:
    """Return ``name`` if it is a safe queue or topic name, else raise ``Invalid``.

    ``.`` and ``..`` are refused: a URL path cannot carry them as a segment.
    """
    pattern, longest = (TOPIC_NAME_PATTERN, 261) if kind == "topic" else (NAME_PATTERN, 80)
    if not pattern.fullmatch(name):
        rule = (
            f"{kind} names are 1-{longest} characters of A-Z, a-z, 0-9, '_', '.', '-' "
            "(not '.' or '..'), after 'application:' in an application"
        )
        raise Invalid(rule if field == "name" else f"{field}: {rule}", field=field)
    return name


def parse_id(text: str) -> int:
    """Return the message id written in ``text`` (decimal), else raise ``Invalid``."""
    if not (text.isascii() and text.isdigit() and len(text) <= 19):
        raise Invalid(f"message ids are decimal integers in [0, {ID_MAX}]", field="id")
    value = int(text)
    if value > ID_MAX:
        raise Invalid(f"message ids are decimal integers in [0, {ID_MAX}]", field="id")
    return value


@dataclass(frozen=True, slots=True)
class RetryBackoff:
    """How long a message waits after its lease lapsed: the retry-exchange pattern.

    After the ``n``-th receive, ``min(max_seconds, initial_seconds * multiplier^(n-1))``.
    """

    initial_seconds: float = 1.0
    multiplier: float = 2.0
    max_seconds: float = 900.0

    def __post_init__(self) -> None:
        _check_number("retry_backoff.initial_seconds", self.initial_seconds, MAX_VISIBILITY_TIMEOUT)
        _check_number("retry_backoff.max_seconds", self.max_seconds, MAX_VISIBILITY_TIMEOUT)
        _check_number("retry_backoff.multiplier", self.multiplier, 100.0)
        if self.multiplier < 1:
            raise Invalid("retry_backoff.multiplier must be >= 1", "retry_backoff.multiplier")
        if self.initial_seconds > self.max_seconds:
            raise Invalid(
                "retry_backoff.initial_seconds must not exceed max_seconds",
                "retry_backoff.initial_seconds",
            )

    def delay(self, receive_count: int) -> float:
        """Return the seconds a message waits after its ``receive_count``-th receive."""
        try:
            wait = self.initial_seconds * self.multiplier ** max(0, receive_count - 1)
        except OverflowError:
            return self.max_seconds
        return min(self.max_seconds, wait)

    @classmethod
    def parse(cls, value: object) -> RetryBackoff | None:
        """Return the backoff a JSON value describes (an object, or null for none)."""
        if value is None or isinstance(value, RetryBackoff):
            return value
        if not isinstance(value, dict):
            raise Invalid("retry_backoff must be an object or null", "retry_backoff")
        _only_known(cls, value, "retry_backoff field", "retry_backoff.")
        return cls(**value)


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """A queue's settings: the original Dynamiq's, with its names and defaults, then the
    message lifecycle's (all off by default).

    ``max_receives`` needs a ``dead_letter_queue`` (where a message goes after
    its last receive); that the dead-letter queue exists and is not the queue
    itself is checked by the catalog, which knows the other queues.
    ``receive_wait_seconds`` is the wait of a receive that names none;
    ``max_message_bytes`` caps a message (body and attributes) below the
    node's limit; a ``fifo`` queue takes only messages with a ``group``;
    ``tags`` label the queue; past ``max_depth`` messages, publishes are refused
    (``QueueFull``) until consumers make room. A dedup id holds across the
    whole queue, or, with ``dedup_scope`` "group", within its message's
    group. ``sqs_attributes`` are queue attributes SQS clients set that
    Dynamiq keeps and shows them but does not act on (``Policy``, KMS keys).
    """

    visibility_timeout: float = 30.0
    min_partitions: int = 1
    max_partitions: int = 10
    max_partition_age: float = 432000.0
    compressed_messages: bool = False
    max_receives: int | None = None
    dead_letter_queue: str | None = None
    retry_backoff: RetryBackoff | None = None
    delay_seconds: float = 0.0
    retention_seconds: float | None = None
    dead_letter_on_expiry: bool = False
    dedup_window_seconds: float = 300.0
    content_dedup: bool = False
    expires_after_seconds: float | None = None
    receive_wait_seconds: float = 0.0
    max_message_bytes: int | None = None
    fifo: bool = False
    tags: dict[str, str] | None = None
    max_depth: int | None = None
    dedup_scope: DedupScope = "queue"
    sqs_attributes: dict[str, str] | None = None

    def __post_init__(self) -> None:
        # 0: a message received is visible again at once (its receive counted)
        _check_number(
            "visibility_timeout", self.visibility_timeout, MAX_VISIBILITY_TIMEOUT, zero=True
        )
        _check_int("min_partitions", self.min_partitions)
        _check_int("max_partitions", self.max_partitions)
        _check_number("max_partition_age", self.max_partition_age, MAX_PARTITION_AGE)
        _check_bool("compressed_messages", self.compressed_messages)
        if self.min_partitions > self.max_partitions:
            raise Invalid("min_partitions must not exceed max_partitions", "min_partitions")
        # Stored settings come back from JSON: the backoff as an object.
        object.__setattr__(self, "retry_backoff", RetryBackoff.parse(self.retry_backoff))
        if self.max_receives is not None:
            _check_int("max_receives", self.max_receives, MAX_RECEIVES_LIMIT)
            if self.dead_letter_queue is None:
                raise Invalid("max_receives needs a dead_letter_queue", "max_receives")
        if self.dead_letter_queue is not None:
            if not isinstance(self.dead_letter_queue, str):
                raise Invalid("dead_letter_queue must be a queue name", "dead_letter_queue")
            validate_name("queue", self.dead_letter_queue, "dead_letter_queue")
        _check_number("delay_seconds", self.delay_seconds, MAX_DELAY_SECONDS, zero=True)
        if self.retention_seconds is not None:
            _check_number("retention_seconds", self.retention_seconds, MAX_RETENTION_SECONDS)
        _check_bool("dead_letter_on_expiry", self.dead_letter_on_expiry)
        if self.dead_letter_on_expiry and self.dead_letter_queue is None:
            raise Invalid(
                "dead_letter_on_expiry needs a dead_letter_queue", "dead_letter_on_expiry"
            )
        _check_number("dedup_window_seconds", self.dedup_window_seconds, MAX_DEDUP_WINDOW_SECONDS)
        _check_bool("content_dedup", self.content_dedup)
        if self.expires_after_seconds is not None:
            name = "expires_after_seconds"
            _check_number(name, self.expires_after_seconds, MAX_RETENTION_SECONDS)
            if self.expires_after_seconds < MIN_EXPIRES_AFTER_SECONDS:
                raise Invalid(f"{name} must be >= {MIN_EXPIRES_AFTER_SECONDS:g}", name)
        _check_number("receive_wait_seconds", self.receive_wait_seconds, MAX_WAIT_SECONDS, True)
        if self.max_message_bytes is not None:
            _check_int("max_message_bytes", self.max_message_bytes, MAX_MESSAGE_BYTES)
            if self.max_message_bytes < MIN_MESSAGE_BYTES:
                raise Invalid(
                    f"max_message_bytes must be >= {MIN_MESSAGE_BYTES}", "max_message_bytes"
                )
        _check_bool("fifo", self.fifo)
        if self.tags is not None:
            _check_tags(self.tags)
        if self.max_depth is not None:
            _check_int("max_depth", self.max_depth, MAX_DEPTH_LIMIT)
        if self.dedup_scope not in DEDUP_SCOPES:
            raise Invalid('dedup_scope must be "queue" or "group"', "dedup_scope")
        if self.sqs_attributes is not None:
            _check_sqs_attributes(self.sqs_attributes)

    @property
    def counts_receives(self) -> bool:
        """Whether a lapsed lease is looked at: for a dead-letter move or a backoff."""
        return self.max_receives is not None or self.retry_backoff is not None

    def to_dict(self) -> dict[str, Any]:
        """Return the settings as a JSON-ready dict."""
        return asdict(self)

    def updated(self, changes: dict[str, Any]) -> QueueSettings:
        """Return a copy with ``changes`` applied, validated; unknown keys raise ``Invalid``."""
        _only_known(type(self), changes, "queue setting")
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class QueueRecord:
    """A queue as the catalog keeps it: its name, its bucket in the store (a new one
    after a purge or a re-creation) and its settings."""

    name: str
    uid: str
    settings: QueueSettings
    created_ms: int = 0  # epoch ms; 0 for a queue created before they were kept
    modified_ms: int = 0  # when its settings last changed (created, configured)


@dataclass(frozen=True, slots=True)
class Notice:
    """What a publish to a topic says of one message beyond the message itself: the
    id SNS clients know it by, and its subject."""

    message_id: str
    subject: str | None = None

    @classmethod
    def new(cls, subject: str | None = None) -> Notice:
        """A notice with a fresh id."""
        return cls(str(uuid.uuid4()), subject)


def topic_arn(region: str, account: str, topic: str) -> str:
    """The ARN naming ``topic`` to SNS clients."""
    return f"arn:aws:sns:{region}:{account}:{topic}"


def check_token(field: str, value: object) -> str:
    """Return ``value`` if it is a valid dedup id or group, else raise ``Invalid``."""
    if not isinstance(value, str) or not TOKEN.fullmatch(value):
        raise Invalid(f"{field} must be {TOKEN_RULE}", field)
    return value


def _only_known(kind: type, given: dict[str, Any], what: str, prefix: str = "") -> None:
    """Raise ``Invalid`` naming the first key of ``given`` that is not a field of ``kind``."""
    unknown = sorted(set(given) - {f.name for f in fields(kind)})
    if unknown:
        raise Invalid(f"unknown {what} {unknown[0]!r}", field=prefix + unknown[0])


def _check_sqs_attributes(attributes: object) -> None:
    if not isinstance(attributes, dict) or len(attributes) > MAX_SQS_ATTRIBUTES:
        raise Invalid(
            f"sqs_attributes must be an object of at most {MAX_SQS_ATTRIBUTES} texts",
            "sqs_attributes",
        )
    for key, value in attributes.items():
        if not isinstance(value, str) or len(value) > MAX_SQS_ATTRIBUTE_TEXT:
            raise Invalid(
                f"sqs_attributes.{key} must be a text of at most {MAX_SQS_ATTRIBUTE_TEXT}",
                "sqs_attributes",
            )


def _check_tags(tags: object) -> None:
    if not isinstance(tags, dict) or len(tags) > MAX_TAGS:
        raise Invalid(f"tags must be an object of at most {MAX_TAGS} tags", "tags")
    for key, value in tags.items():
        if not 0 < len(key) <= MAX_TAG_KEY or not isinstance(value, str) or len(value) > 256:
            raise Invalid(
                f"a tag is a key of 1 to {MAX_TAG_KEY} characters and a text of at most 256",
                "tags",
            )


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise Invalid(f"{name} must be true or false", name)


def _check_number(name: str, value: object, upper: float, zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise Invalid(f"{name} must be a number", field=name)
    if zero and not 0 <= value <= upper:
        raise Invalid(f"{name} must be >= 0 and <= {upper:g}", field=name)
    if not zero and not 0 < value <= upper:
        raise Invalid(f"{name} must be > 0 and <= {upper:g}", field=name)


def _check_int(name: str, value: object, upper: int = MAX_PARTITIONS_LIMIT) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{name} must be an integer", field=name)
    if not 1 <= value <= upper:
        raise Invalid(f"{name} must be between 1 and {upper}", field=name)


DeadLetterReason = Literal["max_receives", "expired"]


class DeadLetter(msgspec.Struct, frozen=True, array_like=True):
    """Why and whence a message came into a dead-letter queue.

    ``reason`` is ``"max_receives"`` (its last allowed lease ended without a
    delete) or ``"expired"`` (its retention or time to live ran out).
    """

    source_queue: str
    reason: DeadLetterReason
    receive_count: int
    dead_lettered_ms: int


class Message(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """A message as a consumer sees it.

    A frozen struct rather than a dataclass: a receive builds one per message
    on the hot path, and this is eight times cheaper to make.
    ``receive_count`` counts its leases, this one included (0 in a peek of a
    message never received); ``first_received_ms`` is 0 until its first;
    ``expires_ms`` is 0 for a message without a time to live of its own.
    ``attributes``, ``routing_key``, ``group``, ``dedup_id``, ``trace`` and
    ``attribute_types`` are what its producer attached.
    """

    id: int
    body: bytes
    published_ms: int = 0
    receive_count: int = 0
    first_received_ms: int = 0
    dead_letter: DeadLetter | None = None
    expires_ms: int = 0
    attributes: Attributes | None = None
    routing_key: str | None = None
    group: str | None = None
    dedup_id: str | None = None
    trace: str | None = None
    attribute_types: dict[str, str] | None = None


class Outgoing(msgspec.Struct, frozen=True):
    """A message to publish, with what it asks beyond its body.

    ``delay_seconds`` None means the queue's ``delay_seconds``; ``ttl_seconds``
    None means it does not expire (its queue's retention still applies).
    ``attributes`` travel with it; a topic routes it by ``routing_key`` and
    its attributes. A second message with its ``dedup_id`` within its queue's
    ``dedup_window_seconds`` is not stored (in the queue, or in its group with
    ``dedup_scope`` "group"). Messages of one ``group`` are delivered in the
    order they are due (published, plus any delay), a receive's worth at a time.
    """

    body: bytes
    delay_seconds: float | None = None
    ttl_seconds: float | None = None
    attributes: Attributes | None = None
    routing_key: str | None = None
    dedup_id: str | None = None
    group: str | None = None
    trace: str | None = None  # a tracing header (SQS's AWSTraceHeader), kept as given
    # Per attribute whose value does not say it, its SQS type (``attribute_types``).
    attribute_types: dict[str, str] | None = None


T = TypeVar("T")


class Published(list[T]):
    """The ids of published messages in request order, with which of them answered
    a duplicate: a message whose dedup id its queue had seen within the window,
    answered with the first message's id (nothing stored)."""

    __slots__ = ("duplicate", "spooled")

    def __init__(
        self, ids: Iterable[T] = (), duplicate: Iterable[bool] = (), spooled: bool = False
    ) -> None:
        super().__init__(ids)
        flags = list(duplicate)
        self.duplicate: list[bool] = flags if any(flags) else []
        """Per message, whether it was a duplicate; empty when none was."""
        self.spooled = spooled
        """No node took the publish: the client's spool keeps it to send later (no ids)."""


@dataclass(frozen=True, slots=True)
class ReceiveRequest:
    """What a consumer asks of a receive: up to ``max_messages`` leased from ``queue``.

    ``visibility_timeout`` None means the queue's; with ``wait_seconds`` the
    receive waits that long for a message when none is visible.
    """

    queue: str
    max_messages: int
    visibility_timeout: float | None = None
    wait_seconds: float = 0.0


# Asked of a peer's stats beside queue names: its sums over every queue it knows of
# (no queue is named so; a peer that does not know it answers nothing for it).
EVERY_QUEUE = ""


class LocalQueueStats(msgspec.Struct, frozen=True, array_like=True):
    """What only one node knows of a queue: its leases in flight, its rates (msg/s),
    and the messages it dead-lettered, expired and redrove since it started."""

    in_flight: int = 0
    publish: float = 0.0
    receive: float = 0.0
    delete: float = 0.0
    dead_lettered: int = 0
    expired: int = 0
    redriven: int = 0

    def __add__(self, other: LocalQueueStats) -> LocalQueueStats:
        pairs = zip(msgspec.structs.astuple(self), msgspec.structs.astuple(other), strict=True)
        return LocalQueueStats(*(mine + theirs for mine, theirs in pairs))


class HeldLease(msgspec.Struct, frozen=True, array_like=True):
    """A live lease handed from one node to another: the message, its seconds left,
    and the receive count it was delivered with (0: not known)."""

    id: int
    seconds_left: float
    receive_count: int = 0
    first_received_ms: int = 0
    group: str | None = None
