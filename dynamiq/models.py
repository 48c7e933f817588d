"""Frozen value types shared by the server and the client."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any

import msgspec

from dynamiq.errors import Invalid
from dynamiq.keyspace import ID_MAX

__all__ = [
    "NAME_PATTERN",
    "HeldLease",
    "LocalQueueStats",
    "Message",
    "QueueSettings",
    "parse_id",
    "validate_name",
]

# 1-80 characters of A-Z a-z 0-9 _ . -, but not "." or ".." (a URL path cannot carry them).
NAME_PATTERN = re.compile(r"^(?!\.\.?$)[A-Za-z0-9_.-]{1,80}$")
MAX_VISIBILITY_TIMEOUT = 12 * 3600.0
MAX_PARTITIONS_LIMIT = 256
MAX_PARTITION_AGE = float(10**9)


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


def validate_name(kind: str, name: str) -> str:
    """Return ``name`` if it is a safe queue or topic name, else raise ``Invalid``.

    ``.`` and ``..`` are refused: a URL path cannot carry them as a segment.
    """
    if not NAME_PATTERN.fullmatch(name):
        raise Invalid(
            f"{kind} names are 1-80 characters of A-Z, a-z, 0-9, '_', '.', '-' (not '.' or '..')",
            field="name",
        )
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
class QueueSettings:
    """A queue's settings, with the original Dynamiq's names and defaults."""

    visibility_timeout: float = 30.0
    min_partitions: int = 1
    max_partitions: int = 10
    max_partition_age: float = 432000.0
    compressed_messages: bool = False

    def __post_init__(self) -> None:
        _check_number("visibility_timeout", self.visibility_timeout, MAX_VISIBILITY_TIMEOUT)
        _check_int("min_partitions", self.min_partitions)
        _check_int("max_partitions", self.max_partitions)
        _check_number("max_partition_age", self.max_partition_age, MAX_PARTITION_AGE)
        if not isinstance(self.compressed_messages, bool):
            raise Invalid("compressed_messages must be true or false", "compressed_messages")
        if self.min_partitions > self.max_partitions:
            raise Invalid("min_partitions must not exceed max_partitions", "min_partitions")

    def to_dict(self) -> dict[str, Any]:
        """Return the settings as a JSON-ready dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def updated(self, changes: dict[str, Any]) -> QueueSettings:
        """Return a copy with ``changes`` applied, validated; unknown keys raise ``Invalid``."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise Invalid(f"unknown queue setting {unknown[0]!r}", field=unknown[0])
        return replace(self, **changes)


def _check_number(name: str, value: object, upper: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Invalid(f"{name} must be a number", field=name)
    if not 0 < value <= upper:
        raise Invalid(f"{name} must be > 0 and <= {upper:g}", field=name)


def _check_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{name} must be an integer", field=name)
    if not 1 <= value <= MAX_PARTITIONS_LIMIT:
        raise Invalid(f"{name} must be between 1 and {MAX_PARTITIONS_LIMIT}", field=name)


class Message(msgspec.Struct, frozen=True, gc=False):
    """A message as a consumer sees it.

    A frozen struct rather than a dataclass: a receive builds one per message
    on the hot path, and this is eight times cheaper to make.
    """

    id: int
    body: bytes
    published_ms: int = 0


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

    def at_once(self) -> ReceiveRequest:
        """The same request without the wait."""
        return replace(self, wait_seconds=0.0) if self.wait_seconds else self


class LocalQueueStats(msgspec.Struct, frozen=True, array_like=True):
    """What only one node knows of a queue: its leases in flight and its rates (msg/s)."""

    in_flight: int = 0
    publish: float = 0.0
    receive: float = 0.0
    delete: float = 0.0

    def __add__(self, other: LocalQueueStats) -> LocalQueueStats:
        return LocalQueueStats(
            self.in_flight + other.in_flight,
            self.publish + other.publish,
            self.receive + other.receive,
            self.delete + other.delete,
        )


class HeldLease(msgspec.Struct, frozen=True, array_like=True):
    """A live lease handed from one node to another: the message and its seconds left."""

    id: int
    seconds_left: float
