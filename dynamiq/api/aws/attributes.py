"""SQS message attributes as Dynamiq's, and back (pure).

``String`` values are kept as text, ``Binary`` as bytes, and ``Number`` as a
number when the text is its canonical form (``12``, ``-3.5``): so filter
policies compare them as numbers. A number written otherwise (``1.50``,
``1e3``, more digits than a double holds) is kept as its text. A type its
kept value does not say (a number kept as text, a custom type such as
``Number.java.lang.Long``, ``String.json``, ``Binary.gif``) is kept beside
it (the message's ``attribute_types``): a receive answers every attribute
with the type it was sent with, and its digest over that type, as SQS does.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from dynamiq.api.aws.digests import TypedValue
from dynamiq.api.aws.errors import AwsError
from dynamiq.models import ATTRIBUTE_TYPE, Attributes, kept_value, natural_type, parse_number

__all__ = [
    "MAX_MESSAGE_ATTRIBUTES",
    "SentAttributes",
    "received_attributes",
    "rendered",
    "sent_attributes",
    "typed_size",
    "typed_value",
    "valid_body",
]

MAX_MESSAGE_ATTRIBUTES = 10
_NAME = re.compile(r"^(?!\.)(?!.*\.\.)(?!.*\.$)[A-Za-z0-9_.-]{1,256}$")
# Characters SQS allows in a body: #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF
_FORBIDDEN = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def valid_body(body: str) -> str:
    """The body, unless it has characters SQS refuses."""
    if not body:  # as absent, to SQS
        raise AwsError("MissingParameter", "The request must contain the parameter MessageBody.")
    # Printable ASCII is all allowed: the pattern is searched only beyond it.
    if not (body.isascii() and body.isprintable()) and _FORBIDDEN.search(body):
        raise AwsError(
            "InvalidMessageContents",
            "Invalid binary character in the message body: only Unicode characters of "
            "XML 1.0 are allowed.",
        )
    return body


class SentAttributes(NamedTuple):
    """A send's ``MessageAttributes``: as SQS typed them (for the digest), as kept, and
    the types of those whose kept values do not say them (``attribute_types``)."""

    typed: dict[str, TypedValue]
    kept: Attributes
    types: dict[str, str]


def sent_attributes(given: object) -> SentAttributes:
    """Read a send's ``MessageAttributes``."""
    sent = SentAttributes({}, {}, {})
    if given is None:
        return sent
    if not isinstance(given, dict):
        raise _invalid("MessageAttributes must be an object")
    if len(given) > MAX_MESSAGE_ATTRIBUTES:
        raise _invalid(
            f"Number of message attributes [{len(given)}] exceeds the allowed maximum [10]."
        )
    for name, spec in given.items():
        if not _NAME.match(name) or name.lower().startswith(("aws.", "amazon.")):
            raise _invalid(f"Message attribute name '{name}' is invalid.")
        data_type = spec.get("DataType") if isinstance(spec, dict) else None
        if not isinstance(data_type, str) or not ATTRIBUTE_TYPE.fullmatch(data_type):
            raise _invalid(
                f"The message attribute '{name}' has an invalid message attribute type, the "
                "set of supported type prefixes is Binary, Number, and String."
            )
        sent.typed[name] = value = _value(name, data_type, spec)
        sent.kept[name] = kept = kept_value(data_type, value[1])
        if data_type != natural_type(kept):
            sent.types[name] = data_type
    return sent


def typed_size(typed: Mapping[str, TypedValue]) -> int:
    """The bytes attributes count toward a message's size, as SQS counts them: each
    one's name, type and value."""
    return sum(
        len(name.encode())
        + len(data_type)
        + len(value if isinstance(value, bytes) else value.encode())
        for name, (data_type, value) in typed.items()
    )


def _value(name: str, data_type: str, spec: dict[str, Any]) -> TypedValue:
    if data_type.startswith("Binary"):
        raw = spec.get("BinaryValue")
        if isinstance(raw, str):
            try:
                raw = base64.b64decode(raw, validate=True)
            except (binascii.Error, ValueError):
                raise _invalid(f"Message attribute '{name}' is not valid base64.") from None
        if not isinstance(raw, bytes) or not raw:
            raise _invalid(f"Message attribute '{name}' must contain a non-empty value.")
        return data_type, raw
    text = spec.get("StringValue")
    if not isinstance(text, str) or not text:
        kind = data_type.split(".", 1)[0]
        raise _invalid(
            f"Message (user) attribute '{name}' must contain a non-empty value of type '{kind}'."
        )
    if data_type.startswith("Number") and parse_number(text) is None:
        raise _invalid(f"Can't cast the value of message (user) attribute '{name}' to a number.")
    return data_type, text


def received_attributes(
    attributes: Attributes | None, wanted: list[str], types: dict[str, str] | None = None
) -> dict[str, TypedValue]:
    """The attributes a receive asked for (``All``, ``.*``, names, ``prefix.*``), typed
    as they were sent."""
    if not attributes or not wanted:
        return {}
    every = "All" in wanted or ".*" in wanted
    prefixes = tuple(w[:-1] for w in wanted if w.endswith(".*"))
    chosen = {n: v for n, v in attributes.items() if every or n in wanted or n.startswith(prefixes)}
    labels = types or {}
    return {name: typed_value(value, labels.get(name)) for name, value in chosen.items()}


def typed_value(value: Any, label: str | None = None) -> TypedValue:
    """An attribute's value as SQS types it: under its own label, or the one its
    value says."""
    if isinstance(value, bytes):
        return label or "Binary", value
    if isinstance(value, bool):
        return label or "String", str(value).lower()
    return label or natural_type(value), str(value)


def rendered(typed: Mapping[str, TypedValue]) -> dict[str, dict[str, str]]:
    """Attributes in the wire's form."""
    out: dict[str, dict[str, str]] = {}
    for name, (data_type, value) in typed.items():
        if isinstance(value, bytes):
            out[name] = {"DataType": data_type, "BinaryValue": base64.b64encode(value).decode()}
        else:
            out[name] = {"DataType": data_type, "StringValue": value}
    return out


def _invalid(message: str) -> AwsError:
    return AwsError("InvalidParameterValue", message)
