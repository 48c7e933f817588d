"""A message's attributes: what its producer attaches (pure).

Names are 1-128 of ``A-Z a-z 0-9 _ . -``; values are text, numbers or bytes.
An attribute whose value does not say its SQS type (a custom label such as
``Number.java.lang.Long``, or a number kept as written, ``1.50``) carries the
type beside it, in the message's ``attribute_types``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from dynamiq.errors import Invalid

__all__ = [
    "ATTRIBUTE_NAME",
    "ATTRIBUTE_TYPE",
    "MAX_ATTRIBUTES",
    "AttributeValue",
    "Attributes",
    "attribute_types_size",
    "attributes_size",
    "kept_value",
    "natural_type",
    "parse_number",
]

MAX_ATTRIBUTES = 16
ATTRIBUTE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
# An attribute's type as SQS labels it: String, Number or Binary, with an optional
# custom part of printable characters (``Number.java.lang.Long``, ``String.json``,
# ``Binary.gif``; SNS takes ``String.  spaced.``), 256 characters in all.
ATTRIBUTE_TYPE = re.compile(r"^(String|Number|Binary)(\.[\x20-\x7e\u00a0-\uffff]{1,249})?$")

# What a producer attaches to a message: text, numbers, or bytes (base64 on the wire).
AttributeValue = str | int | float | bytes
# Stored and carried as msgpack, which tells text from bytes itself (a typed
# decoder cannot: it takes one string-like type per union).
Attributes = dict[str, Any]


def attributes_size(attributes: Attributes | None) -> int:
    """Check a message's attributes; return their size (names and values, in bytes),
    which counts toward the message's size.

    Raises:
        Invalid: more than ``MAX_ATTRIBUTES``, a bad name, or a value that is
            not text, a finite number or bytes.
    """
    if not attributes:
        return 0
    if len(attributes) > MAX_ATTRIBUTES:
        raise Invalid(f"at most {MAX_ATTRIBUTES} attributes per message", "attributes")
    size = 0
    for name, value in attributes.items():
        field = f"attributes.{name[:128]}"
        if not ATTRIBUTE_NAME.fullmatch(name):
            rule = "attribute names are 1-128 characters of A-Z, a-z, 0-9, '_', '.', '-'"
            raise Invalid(f"{field}: {rule}", field)
        if isinstance(value, str):
            size += len(value.encode())
        elif isinstance(value, bytes):
            size += len(value)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise Invalid(f"{field}: attribute numbers must be finite", field)
            size += len(repr(value))
        else:
            rule = 'attribute values are strings, numbers or {"base64": "..."}'
            raise Invalid(f"{field}: {rule}", field)
        size += len(name)
    return size


def parse_number(text: str) -> int | float | None:
    """The number ``text`` writes (None: none)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


def kept_value(data_type: str, value: str | bytes) -> AttributeValue:
    """A sent attribute's value as a message keeps it: a ``Number`` written in its
    canonical form (``12``, ``-3.5``) as that number, anything else as sent."""
    if isinstance(value, bytes) or not data_type.startswith("Number"):
        return value
    number = parse_number(value)
    return number if number is not None and str(number) == value else value


def natural_type(value: AttributeValue) -> str:
    """The SQS type an attribute's value says by itself."""
    if isinstance(value, bytes):
        return "Binary"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "Number"
    return "String"


def attribute_types_size(attributes: Attributes | None, types: dict[str, str] | None) -> int:
    """Check the SQS types of attributes whose values do not say them; return their
    size (the labels' bytes, which count toward the message's size).

    A label names an attribute the message has, and agrees with its value: a
    ``Binary`` one with bytes, a ``Number`` one with a number or a text that is
    one (``1.50`` kept as written), a ``String`` one with text or a number.

    Raises:
        Invalid: a label that names no attribute, or disagrees with its value.
    """
    if not types:
        return 0
    size = 0
    for name, label in types.items():
        field = f"attribute_types.{name[:128]}"
        if not isinstance(label, str) or not ATTRIBUTE_TYPE.fullmatch(label):
            raise Invalid(f"{field}: a type is String, Number or Binary, then .custom", field)
        if attributes is None or name not in attributes:
            raise Invalid(f"{field}: names no attribute of the message", field)
        value = attributes[name]
        natural = natural_type(value)
        fits = {
            "Binary": natural == "Binary",
            "Number": natural == "Number" or (natural == "String" and _is_number(value)),
            "String": natural != "Binary",
        }
        if not fits[label.partition(".")[0]]:
            raise Invalid(f"{field}: {label} does not fit a {natural} value", field)
        size += len(label)
    return size


def _is_number(value: object) -> bool:
    try:
        float(str(value))
    except ValueError:
        return False
    return True
