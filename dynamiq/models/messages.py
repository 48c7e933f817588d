"""Messages as producers send them and consumers receive them, and what nodes say of them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypeVar

import msgspec

from dynamiq.models.attributes import (
    Attributes,
)

__all__ = [
    "EVERY_QUEUE",
    "DeadLetter",
    "DeadLetterReason",
    "HeldLease",
    "LocalQueueStats",
    "Message",
    "Outgoing",
    "Published",
    "ReceiveRequest",
]

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
    ``attributes``, ``routing_key``, ``group``, ``dedup_id``, ``trace``,
    ``attribute_types`` and ``tenant`` are what its producer attached.
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
    tenant: str | None = None


class Outgoing(msgspec.Struct, frozen=True):
    """A message to publish, with what it asks beyond its body.

    ``delay_seconds`` None means the queue's ``delay_seconds``; ``ttl_seconds``
    None means it does not expire (its queue's retention still applies).
    ``attributes`` travel with it; a topic routes it by ``routing_key`` and
    its attributes. A second message with its ``dedup_id`` within its queue's
    ``dedup_window_seconds`` is not stored (in the queue, or in its group with
    ``dedup_scope`` "group"). Messages of one ``group`` are delivered in the
    order they are due (published, plus any delay), a receive's worth at a time.
    ``dedup_scope`` ("queue" or "group"), when given, stands for the queue's
    own: a FIFO topic's copies are deduplicated as the topic's
    ``FifoThroughputScope`` says, whatever the queue's.
    A ``tenant`` (SQS's ``MessageGroupId`` on a standard queue) orders nothing:
    a tenant holding more than its share of the queue's messages in flight
    waits while the others' messages are served (``fairness``).
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
    tenant: str | None = None
    dedup_scope: str | None = None


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
