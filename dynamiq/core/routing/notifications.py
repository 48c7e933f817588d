"""SNS notifications: how a topic's message reaches a queue subscribed without raw
delivery (pure).

SNS wraps what it delivers to such a queue in a JSON envelope, and code
written against SNS reads the message from it: ``Type``, ``MessageId`` (the
publish's id, the same in every queue), ``TopicArn``, ``Subject`` when one
was given, ``Message`` (the body as text), ``Timestamp`` and the message's
attributes as ``{"Type", "Value"}``. The copy carries no attributes of its
own and no routing key; its delay, group and deduplication id are kept.
Envelopes are not signed: there is no certificate to check them against.

A FIFO topic's archive keeps each message as its envelope, which holds all a
replay needs: ``replayed`` marks it for a queue that takes envelopes,
``unwrapped`` gives back the message for one that takes raw deliveries.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import UTC, datetime

import msgspec

from dynamiq.core.clock import Clock
from dynamiq.models import AttributeValue, Notice, Outgoing, kept_value, natural_type, topic_arn

__all__ = ["Address", "Envelopes", "replayed", "sns_timestamp", "unwrapped"]


def sns_timestamp(wall_ms: int) -> str:
    """A time as SNS's documents write it (``2026-01-01T00:00:00.000Z``)."""
    stamp = datetime.fromtimestamp(wall_ms / 1000, UTC)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


Address = Callable[[str], tuple[str, str]]
"""A topic's full name -> the account it lives in, and its name there."""


class Envelopes:
    """Wraps messages of this node's topics, named by ARNs of ``region`` and the account
    ``address`` says a topic lives in (``account`` for every one by default)."""

    def __init__(
        self, region: str, account: str, clock: Clock, address: Address | None = None
    ) -> None:
        self._region = region
        self._address: Address = address or (lambda topic: (account, topic))
        self._clock = clock

    def topic_arn(self, topic: str) -> str:
        return topic_arn(self._region, *self._address(topic))

    def wrap(self, topic: str, message: Outgoing | bytes, notice: Notice) -> Outgoing:
        """The copy of ``message`` a queue subscribed without raw delivery stores."""
        outgoing = message if isinstance(message, Outgoing) else Outgoing(message)
        envelope: dict[str, object] = {
            "Type": "Notification",
            "MessageId": notice.message_id,
            "TopicArn": self.topic_arn(topic),
        }
        if notice.subject is not None:
            envelope["Subject"] = notice.subject
        envelope["Message"] = outgoing.body.decode(errors="replace")
        envelope["Timestamp"] = sns_timestamp(self._clock.wall_ms())
        if outgoing.attributes:
            labels = outgoing.attribute_types or {}
            envelope["MessageAttributes"] = {
                name: _typed(value, labels.get(name)) for name, value in outgoing.attributes.items()
            }
        body = json.dumps(envelope, ensure_ascii=False).encode()
        return msgspec.structs.replace(
            outgoing, body=body, attributes=None, routing_key=None, attribute_types=None
        )


def _typed(value: AttributeValue, label: str | None) -> dict[str, str]:
    """An attribute as an envelope shows it: under the type it was sent with."""
    if isinstance(value, bytes):
        return {"Type": label or "Binary", "Value": base64.b64encode(value).decode()}
    if isinstance(value, bool):
        return {"Type": label or "String", "Value": str(value).lower()}
    return {"Type": label or natural_type(value), "Value": str(value)}


def replayed(envelope: bytes) -> bytes:
    """A stored notification as a replay delivers it: the same, marked ``Replayed``."""
    document = json.loads(envelope)
    document["Replayed"] = True
    return json.dumps(document, ensure_ascii=False).encode()


def unwrapped(envelope: bytes) -> Outgoing:
    """The message a stored notification holds, as a raw delivery stores it: its body,
    and its attributes under the types they were sent with."""
    document = json.loads(envelope)
    attributes: dict[str, AttributeValue] = {}
    labels: dict[str, str] = {}
    for name, typed in (document.get("MessageAttributes") or {}).items():
        label, value = typed["Type"], typed["Value"]
        kept = _untyped(label, value)
        attributes[name] = kept
        if natural_type(kept) != label:
            labels[name] = label
    return Outgoing(
        document["Message"].encode(),
        attributes=attributes or None,
        attribute_types=labels or None,
    )


def _untyped(label: str, value: str) -> AttributeValue:
    """An envelope's attribute value as the publish kept it (``_typed``'s inverse)."""
    return kept_value(label, base64.b64decode(value) if label.startswith("Binary") else value)
