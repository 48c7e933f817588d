"""A queue's settings and its record in the catalog, each value held to its bounds."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from dynamiq.errors import Invalid
from dynamiq.models.names import (
    DEDUP_SCOPES,
    MAX_DEDUP_WINDOW_SECONDS,
    MAX_DELAY_SECONDS,
    MAX_DEPTH_LIMIT,
    MAX_MESSAGE_BYTES,
    MAX_PARTITION_AGE,
    MAX_PARTITIONS_LIMIT,
    MAX_RECEIVES_LIMIT,
    MAX_RETENTION_SECONDS,
    MAX_SQS_ATTRIBUTE_TEXT,
    MAX_SQS_ATTRIBUTES,
    MAX_TAG_KEY,
    MAX_TAGS,
    MAX_VISIBILITY_TIMEOUT,
    MAX_WAIT_SECONDS,
    MIN_EXPIRES_AFTER_SECONDS,
    MIN_MESSAGE_BYTES,
    DedupScope,
    validate_name,
)

__all__ = [
    "QueueRecord",
    "QueueSettings",
    "RetryBackoff",
]


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
