"""Reading request bodies and writing JSON responses, the same way on every route."""

from __future__ import annotations

import base64
import binascii
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from dynamiq.api.schemas import OutgoingMessage, ReceivedMessage
from dynamiq.errors import BadRequest, Invalid
from dynamiq.models import Message

__all__ = ["decode_body", "encode_message", "json_response", "read_json"]

T = TypeVar("T")
_encoder = msgspec.json.Encoder()


def json_response(payload: Any, status: int = 200) -> web.Response:
    """Return ``payload`` (a struct, dict, list or scalar) as a JSON response."""
    return web.Response(
        body=_encoder.encode(payload), status=status, content_type="application/json"
    )


async def read_json(request: web.Request, kind: type[T], optional: bool = False) -> T:
    """Decode and validate the request body as ``kind``.

    Raises:
        BadRequest: the body is not JSON.
        Invalid: the JSON does not fit ``kind`` (types, ranges, unknown fields).
    """
    raw = await request.read()
    if optional and not raw.strip():
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
    raise invalid


def _reason(exc: Exception) -> str:
    return "nested too deeply" if isinstance(exc, RecursionError) else str(exc)


def decode_body(message: OutgoingMessage) -> bytes:
    """Return the bytes of a message to publish, per its encoding."""
    if message.encoding == "utf-8":
        return message.body.encode()
    try:
        return base64.b64decode(message.body, validate=True)
    except (binascii.Error, ValueError):
        raise Invalid("a body with encoding base64 is not valid base64", field="body") from None


def encode_message(message: Message, force_base64: bool = False) -> ReceivedMessage:
    """Return a message for the wire: UTF-8 text when it is, base64 otherwise."""
    if not force_base64:
        try:
            text = message.body.decode()
        except UnicodeDecodeError:
            pass
        else:
            return ReceivedMessage(str(message.id), text, "utf-8", message.published_ms)
    body = base64.b64encode(message.body).decode()
    return ReceivedMessage(str(message.id), body, "base64", message.published_ms)
