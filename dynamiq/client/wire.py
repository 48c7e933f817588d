"""Messages to and from the v2 JSON form, as the clients send and read them."""

from __future__ import annotations

import base64
import functools
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from dynamiq.models import AttributeValue, DeadLetter, Message, Outgoing, Published

__all__ = [
    "Body",
    "Extras",
    "PublishedTopic",
    "attributes_field",
    "attributes_of",
    "body_field",
    "body_of",
    "message",
    "outgoing",
    "publish_request",
    "published",
    "published_topic",
    "trace_parent",
]

Body = bytes | str


class Extras(NamedTuple):
    """What a publish call asks for every message that does not say otherwise."""

    delay_seconds: float | None = None
    ttl_seconds: float | None = None
    attributes: Mapping[str, AttributeValue] | None = None
    routing_key: str | None = None


def outgoing(body: Body | Outgoing, extras: Extras, trace: str | None) -> dict[str, Any]:
    """Return one message of a publish request.

    ``trace`` (a W3C ``traceparent``) goes into the attributes unless the
    message carries one already.
    """
    dedup_id = group = None
    types: dict[str, str] | None = None
    if isinstance(body, Outgoing):
        dedup_id, group, types = body.dedup_id, body.group, body.attribute_types
        delay = extras.delay_seconds if body.delay_seconds is None else body.delay_seconds
        ttl = extras.ttl_seconds if body.ttl_seconds is None else body.ttl_seconds
        attributes = extras.attributes if body.attributes is None else body.attributes
        key = extras.routing_key if body.routing_key is None else body.routing_key
        body = body.body
    else:
        delay, ttl = extras.delay_seconds, extras.ttl_seconds
        attributes, key = extras.attributes, extras.routing_key
    out = body_field(body)
    if delay is not None:
        out["delay_seconds"] = delay
    if ttl is not None:
        out["ttl_seconds"] = ttl
    if trace is not None and (attributes is None or "traceparent" not in attributes):
        attributes = {**(attributes or {}), "traceparent": trace}
    if attributes:
        out["attributes"] = attributes_field(attributes)
    if key is not None:
        out["routing_key"] = key
    if dedup_id is not None:
        out["dedup_id"] = dedup_id
    if group is not None:
        out["group"] = group
    if types:
        out["attribute_types"] = types
    return out


def published(answer: dict[str, Any]) -> Published[int]:
    """Return a queue publish's ids, with which were duplicates."""
    return Published([int(i) for i in answer["ids"]], answer.get("duplicate", ()))


class PublishedTopic(dict[str, Published[int | None]]):
    """A topic publish's ids per queue that took a message (None: one it did not take)."""

    __slots__ = ("spooled",)

    def __init__(self, ids: Mapping[str, Published[int | None]], spooled: bool = False) -> None:
        super().__init__(ids)
        self.spooled = spooled
        """No node took the publish: the client's spool keeps it to send later."""


def published_topic(answer: dict[str, Any]) -> PublishedTopic:
    """Return a topic publish's ids per queue, with which were duplicates.

    A wide fan-out answers thousands of queues, most often one id each, shared
    by all (a broadcast): each id is read once, and a queue's ``Published`` is
    made at the cost of its list (its checks left out).
    """
    duplicate = answer.get("duplicate") or {}
    read: dict[str, int] = {}
    out = PublishedTopic({})
    made = Published.__new__
    for q, ids in answer["ids"].items():
        copies: Published[int | None] = made(Published)
        if len(ids) == 1 and (text := ids[0]) is not None:  # a broadcast's copy
            n = read.get(text)
            if n is None:
                n = read[text] = int(text)
            copies.append(n)
        else:
            copies += [None if i is None else int(i) for i in ids]
        copies.duplicate = list(duplicate[q]) if q in duplicate and any(duplicate[q]) else []
        copies.spooled = False
        out[q] = copies
    return out


def attributes_field(attributes: Mapping[str, AttributeValue]) -> dict[str, Any]:
    """Return attributes in their v2 form (bytes as ``{"base64": ...}``)."""
    return {name: _value(v) for name, v in attributes.items()}


def attributes_of(field: Mapping[str, Any] | None) -> dict[str, AttributeValue] | None:
    """Return attributes from their v2 form."""
    if field is None:
        return None
    return {
        name: base64.b64decode(v["base64"]) if isinstance(v, dict) else v
        for name, v in field.items()
    }


def body_of(data: Mapping[str, Any]) -> bytes:
    """Return a message's body from its v2 form (``body``, and ``encoding``)."""
    text: str = data["body"]
    return base64.b64decode(text) if data.get("encoding") == "base64" else text.encode()


def body_field(body: Body) -> dict[str, Any]:
    """Return a body in its v2 form: text, or base64 with ``"encoding": "base64"``."""
    if isinstance(body, str):
        return {"body": body}
    try:
        return {"body": body.decode()}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode(), "encoding": "base64"}


def _value(value: AttributeValue) -> Any:
    return {"base64": base64.b64encode(value).decode()} if isinstance(value, bytes) else value


def _epoch_ms(text: str | None) -> int:
    return round(datetime.fromisoformat(text).timestamp() * 1000) if text else 0


def message(data: dict[str, Any]) -> Message:
    """Return a received or peeked message."""
    note = data.get("dead_letter")
    return Message(
        int(data["id"]),
        body_of(data),
        int(data["published_at"]),
        int(data.get("receive_count", 0)),
        _epoch_ms(data.get("first_received_at")),
        None
        if note is None
        else DeadLetter(
            note["source_queue"],
            note["reason"],
            int(note["receive_count"]),
            _epoch_ms(note["dead_lettered_at"]),
        ),
        attributes=attributes_of(data.get("attributes")),
        routing_key=data.get("routing_key"),
        group=data.get("group"),
        attribute_types=data.get("attribute_types"),
    )


@functools.cache
def _injector() -> Callable[[dict[str, str]], None] | None:
    try:
        from opentelemetry.propagate import inject
    except ImportError:  # tracing is optional: no dependency on it
        return None
    return inject


def publish_request(bodies: Sequence[Body | Outgoing], extras: Extras) -> dict[str, Any]:
    """Return a publish request: its messages, each with the current span's
    ``traceparent`` (``trace_parent``)."""
    trace = trace_parent()
    return {"messages": [outgoing(b, extras, trace) for b in bodies]}


def trace_parent() -> str | None:
    """The W3C ``traceparent`` of the current OpenTelemetry span, if that library is
    installed and a span is recording; else None."""
    inject = _injector()
    if inject is None:
        return None
    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get("traceparent")
