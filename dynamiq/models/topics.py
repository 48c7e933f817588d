"""What a topic keeps beside its subscriptions (pure): the attributes SNS clients set on
it, kept and shown (``DisplayName``, ``Policy``, ``DeliveryPolicy``, ...), and its tags.

Stored as the JSON of the topic's record; a record written before topics kept
anything (``{}``) reads as no settings.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_TOPIC_TAGS", "Notice", "TopicSettings", "topic_arn"]

MAX_TOPIC_TAGS = 50


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


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """A topic's kept SNS attributes and its tags (None: none)."""

    sns_attributes: dict[str, str] | None = None
    tags: dict[str, str] | None = None

    def encode(self) -> bytes:
        """The stored form: only what is set."""
        kept = {"sns_attributes": self.sns_attributes, "tags": self.tags}
        return json.dumps({k: v for k, v in kept.items() if v}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> TopicSettings:
        """The settings stored as ``raw`` (what a later release added is left aside)."""
        data: dict[str, Any] = json.loads(raw or b"{}")
        return cls(data.get("sns_attributes") or None, data.get("tags") or None)
