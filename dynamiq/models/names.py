"""Names, ids and tokens as every API takes them, and the bounds values are held to (pure)."""

from __future__ import annotations

import re
from typing import Literal

from dynamiq.errors import Invalid
from dynamiq.keyspace import ID_MAX

__all__ = [
    "APPLICATION_PATTERN",
    "DEDUP_SCOPES",
    "ID_PATTERN",
    "MAX_DEDUP_WINDOW_SECONDS",
    "MAX_DELAY_SECONDS",
    "MAX_DEPTH_LIMIT",
    "MAX_MESSAGE_BYTES",
    "MAX_PARTITIONS_LIMIT",
    "MAX_PARTITION_AGE",
    "MAX_RECEIVES_LIMIT",
    "MAX_RETENTION_SECONDS",
    "MAX_ROUTING_KEY",
    "MAX_SQS_ATTRIBUTES",
    "MAX_SQS_ATTRIBUTE_TEXT",
    "MAX_TAGS",
    "MAX_TAG_KEY",
    "MAX_VISIBILITY_TIMEOUT",
    "MAX_WAIT_SECONDS",
    "MIN_EXPIRES_AFTER_SECONDS",
    "MIN_MESSAGE_BYTES",
    "NAME_PATTERN",
    "TOKEN",
    "TOKEN_RULE",
    "TOPIC_NAME_PATTERN",
    "DedupScope",
    "check_token",
    "parse_id",
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


def check_token(field: str, value: object) -> str:
    """Return ``value`` if it is a valid dedup id or group, else raise ``Invalid``."""
    if not isinstance(value, str) or not TOKEN.fullmatch(value):
        raise Invalid(f"{field} must be {TOKEN_RULE}", field)
    return value
