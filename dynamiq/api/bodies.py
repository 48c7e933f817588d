"""Reading request bodies and writing JSON responses, the same way on every route."""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from dynamiq.api.schemas import (
    AttributeBytes,
    DeadLetterNote,
    Encoding,
    OutgoingMessage,
    ReceivedMessage,
)
from dynamiq.errors import BadRequest, Invalid, UnsupportedMediaType
from dynamiq.models import Attributes, AttributeValue, Message, Outgoing

__all__ = [
    "JSON",
    "check_media",
    "decode_body",
    "decode_json",
    "encode_message",
    "iso_time",
    "json_response",
    "outgoing",
    "read_json",
]

T = TypeVar("T")
JSON = msgspec.json.Encoder()  # what every answer's body is encoded with


def json_response(payload: Any, status: int = 200) -> web.Response:
    """Return ``payload`` (a struct, dict, list or scalar) as a JSON response."""
    return web.Response(body=JSON.encode(payload), status=status, content_type="application/json")


async def read_json(request: web.Request, kind: type[T], optional: bool = False) -> T:
    """Decode and validate the request body as ``kind`` (``decode_json``)."""
    check_media(request.body_exists, request.content_type)
    return decode_json(await request.read(), kind, optional)


def check_media(body_exists: bool, content_type: str) -> None:
    """Refuse a body whose ``Content-Type`` is not JSON (an HTML form posting
    ``text/plain`` is one) with ``UnsupportedMediaType``."""
    if body_exists and not _is_json(content_type):
        raise UnsupportedMediaType(f"the body must be sent as application/json, not {content_type}")


def decode_json(raw: bytes, kind: type[T], optional: bool = False) -> T:
    """Decode and validate ``raw`` as ``kind`` (``optional``: no body is ``{}``).

    Raises:
        BadRequest: the body is not JSON.
        Invalid: the JSON does not fit ``kind`` (types, ranges, unknown fields).
    """
    if optional and not raw.strip(_JSON_SPACE):
        raw = b"{}"
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as exc:
        invalid = Invalid(str(exc))
    except (msgspec.DecodeError, RecursionError) as exc:
        raise BadRequest(f"malformed JSON: {_reason(exc)}") from None
    # Typed decoding stops at the first misfit; malformed JSON is still a 400.
    try:
        msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise BadRequest(f"malformed JSON: {_reason(exc)}") from None
    try:  # JSON has one kind of number: to it (and to JSON Schema) 5.0 is the integer 5
        return msgspec.convert(_INTEGRAL.decode(raw), kind)
    except msgspec.ValidationError:
        raise invalid from None


_JSON_SPACE = b" \t\n\r"  # what JSON calls whitespace; bytes.strip() takes more (\x0b, \x0c)


def _integral(literal: str) -> float | int:
    number = float(literal)
    return int(number) if number.is_integer() and abs(number) < 2**63 else number


_INTEGRAL = msgspec.json.Decoder(float_hook=_integral)


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or content_type.endswith("+json")


def _reason(exc: Exception) -> str:
    return "nested too deeply" if isinstance(exc, RecursionError) else str(exc)


def decode_body(message: OutgoingMessage) -> bytes:
    """Return the bytes of a message to publish, per its encoding."""
    if message.encoding == "utf-8":
        return message.body.encode()
    return _unbase64(message.body, "a body with encoding base64", "body")


def _unbase64(text: str, what: str, field: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise Invalid(f"{what} is not valid base64", field=field) from None


def outgoing(message: OutgoingMessage) -> bytes | Outgoing:
    """Return what to publish: the body alone, or with what else it asks for."""
    body = decode_body(message)
    if (
        message.delay_seconds is None
        and message.ttl_seconds is None
        and message.attributes is None
        and message.routing_key is None
        and message.dedup_id is None
        and message.group is None
        and message.attribute_types is None
    ):
        return body
    attributes = None
    if message.attributes:
        attributes = {
            name: _unbase64(v.base64, f"attributes.{name}", f"attributes.{name}")
            if isinstance(v, AttributeBytes)
            else v
            for name, v in message.attributes.items()
        }
    return Outgoing(
        body,
        message.delay_seconds,
        message.ttl_seconds,
        attributes,
        message.routing_key,
        message.dedup_id,
        message.group,
        attribute_types=message.attribute_types or None,
    )


def _wire_attributes(
    attributes: Attributes | None,
) -> dict[str, str | int | float | AttributeBytes] | None:
    if not attributes:
        return None
    return {name: _wire_value(v) for name, v in attributes.items()}


def _wire_value(value: AttributeValue) -> str | int | float | AttributeBytes:
    if isinstance(value, bytes):
        return AttributeBytes(base64.b64encode(value).decode())
    return value


def encode_message(
    message: Message, force_base64: bool = False, shown: Callable[[str], str] = str
) -> ReceivedMessage:
    """Return a message for the wire: UTF-8 text when it is, base64 otherwise
    (``shown``: the name the caller knows a dead letter's source queue by)."""
    body, encoding = _text(message.body, force_base64)
    bare = message.dead_letter is None and message.routing_key is None and message.group is None
    if bare and not (message.receive_count or message.attributes):
        return ReceivedMessage(str(message.id), body, encoding, message.published_ms)
    first = message.first_received_ms
    note = message.dead_letter
    return ReceivedMessage(
        str(message.id),
        body,
        encoding,
        message.published_ms,
        message.receive_count,
        iso_time(first) if first else None,
        None
        if note is None
        else DeadLetterNote(
            shown(note.source_queue),
            note.reason,
            note.receive_count,
            iso_time(note.dead_lettered_ms),
        ),
        _wire_attributes(message.attributes),
        message.routing_key,
        message.group,
        message.attribute_types,
    )


def _text(body: bytes, force_base64: bool) -> tuple[str, Encoding]:
    if not force_base64:
        try:  # not contextlib.suppress: this runs once per message delivered
            return body.decode(), "utf-8"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(body).decode(), "base64"


@functools.lru_cache(maxsize=4096)  # a receive's first deliveries share one moment
def iso_time(epoch_ms: int) -> str:
    """Return epoch milliseconds as ISO 8601 UTC text (``2026-11-23T10:46:03.120Z``)."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
