"""SNS's message archiving and replay for FIFO topics, as its attributes say them.

A FIFO topic's ``ArchivePolicy`` (``{"MessageRetentionPeriod": "<days>"}``, 1
to 365; ``{}`` to stop) keeps what is published to it from then on, and
``BeginningArchiveTime`` tells the earliest publish a replay finds. A
subscription's ``ReplayPolicy`` (``{"PointType": "Timestamp",
"StartingPoint": ..., "EndingPoint": ...}``, ISO 8601 times; no end: now),
given to ``Subscribe`` or ``SetSubscriptionAttributes``, delivers that range
of the archive again, in place of any replay before; ``ReplayStatus`` says
where it stands. A start before the archive's beginning replays from it.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any, NamedTuple

from dynamiq.api.aws.call import Call
from dynamiq.api.aws.errors import invalid_parameter
from dynamiq.errors import Invalid
from dynamiq.service.reports import ReplayView

__all__ = ["Replay", "archive_days", "replay", "replay_asked", "replay_attributes"]

MAX_ARCHIVE_DAYS = 365
POINT_TYPE = "Timestamp"
_STATUS = {"done": "Completed", "failed": "Failed", "cancelled": "Failed"}


def _object(name: str, text: str) -> dict[str, Any]:
    """The JSON object the policy ``name`` is written as."""
    try:
        policy = json.loads(text)
    except ValueError:
        policy = None
    if not isinstance(policy, dict):
        raise invalid_parameter(f"{name} Reason: must be a JSON object")
    return policy


def archive_days(text: str) -> int | None:
    """The days an ``ArchivePolicy`` keeps messages (None: ``{}`` or empty, none)."""
    if not text:
        return None
    policy = _object("ArchivePolicy", text)
    if not policy:
        return None
    if set(policy) != {"MessageRetentionPeriod"}:
        raise invalid_parameter("ArchivePolicy Reason: MessageRetentionPeriod is its only key")
    days = policy["MessageRetentionPeriod"]
    if isinstance(days, str) and days.isdigit():
        days = int(days)
    if isinstance(days, bool) or not isinstance(days, int) or not 0 < days <= MAX_ARCHIVE_DAYS:
        raise invalid_parameter(
            "ArchivePolicy Reason: MessageRetentionPeriod must be "
            f"a number of days from 1 to {MAX_ARCHIVE_DAYS}"
        )
    return days


def _point(policy: dict[str, object], name: str) -> int | None:
    """A ``ReplayPolicy`` time, epoch ms (None: not given)."""
    given = policy.get(name)
    if given is None:
        return None
    try:
        if not isinstance(given, str):
            raise ValueError(given)
        stamp = datetime.fromisoformat(given)
    except ValueError:
        raise invalid_parameter(
            f"ReplayPolicy Reason: {name} must be an ISO 8601 timestamp"
        ) from None
    if stamp.tzinfo is None:
        raise invalid_parameter(f"ReplayPolicy Reason: {name} must name its time zone (Z, +00:00)")
    return round(stamp.timestamp() * 1000)


class Replay(NamedTuple):
    """A replay asked for: the ``ReplayPolicy`` as given, and the range of publish
    times it names (epoch ms; no end: now)."""

    policy: str
    start_ms: int
    end_ms: int | None


def replay_asked(call: Call, topic: str, text: str) -> Replay:
    """The replay a ``ReplayPolicy`` asks of ``topic``'s archive, checked before anything
    is done."""
    policy = _object("ReplayPolicy", text)
    unknown = set(policy) - {"PointType", "StartingPoint", "EndingPoint"}
    if unknown:
        raise invalid_parameter(f"ReplayPolicy Reason: unknown key {sorted(unknown)[0]}")
    if policy.get("PointType") != POINT_TYPE:
        raise invalid_parameter(f"ReplayPolicy Reason: PointType must be {POINT_TYPE}")
    start, end = _point(policy, "StartingPoint"), _point(policy, "EndingPoint")
    if start is None:
        raise invalid_parameter("ReplayPolicy Reason: StartingPoint is required")
    if end is not None and end < start:
        raise invalid_parameter("ReplayPolicy Reason: EndingPoint must not be before StartingPoint")
    if start > time.time() * 1000:
        raise invalid_parameter("ReplayPolicy Reason: StartingPoint must not be in the future")
    if call.node.moves.archive_beginning_ms(topic) is None:
        raise invalid_parameter("ReplayPolicy Reason: the topic keeps no archive (ArchivePolicy)")
    return Replay(text, start, end)


async def replay(call: Call, topic: str, queue: str, asked: Replay) -> None:
    """Start the replay ``asked`` of ``queue``'s subscription to ``topic``."""
    try:
        await call.node.moves.replay(topic, queue, *asked)
    except Invalid as refused:
        raise invalid_parameter(f"ReplayPolicy Reason: {refused}") from None


def replay_attributes(view: ReplayView | None) -> dict[str, str]:
    """What a subscription's attributes say of its replay (nothing: it had none)."""
    if view is None:
        return {}
    if view.state == "running":
        status = "In progress" if view.started else "Pending"
    else:
        status = _STATUS[view.state]
    return {"ReplayPolicy": view.policy, "ReplayStatus": status}
