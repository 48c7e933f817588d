"""SNS's own checks of a publish's message attributes and size, in its own words (pure).

SNS refuses a malformed message attribute as ``ParameterValueInvalid`` with
texts of its own (SQS words the same faults otherwise), and one without a
``DataType`` as the ``ValidationError`` of its request model; in a batch
either fails the whole request. A message, its attributes' names, types and
values counted with it, is at most 256 KiB, and so is a batch's sum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dynamiq.api.aws.attributes import SentAttributes, sent_attributes, typed_size
from dynamiq.api.aws.errors import SnsError
from dynamiq.models import ATTRIBUTE_TYPE

__all__ = ["MAX_SNS_MESSAGE_BYTES", "check_batch", "message_size", "sns_attributes"]

MAX_SNS_MESSAGE_BYTES = 256 * 1024
MAX_NAME_BYTES = 255
_FIELDS = {"String": "StringValue", "Number": "StringValue", "Binary": "BinaryValue"}
_EMPTY = (None, "", b"")  # a value not given


def _refused(message: str) -> SnsError:
    return SnsError("ParameterValueInvalid", message)


def _check_name(name: str) -> None:
    if len(name.encode()) > MAX_NAME_BYTES:
        raise _refused("Length of message attribute name must be less than 256 bytes.")
    for char in name:
        if not (char.isascii() and (char.isalnum() or char in "-_.")):
            raise _refused(
                f"Invalid non-alphanumeric character '#x{ord(char):X}' was found in the "
                "message attribute name. Can only include alphanumeric characters, hyphens, "
                "underscores, or dots."
            )
    if name.startswith("."):
        raise _refused("Invalid message attribute name starting with character '.' was found.")
    if name.endswith("."):
        raise _refused("Invalid message attribute name ending with character '.' was found.")
    if ".." in name:
        raise _refused("Message attribute name can not have successive '.' character.")


def _check_value(name: str, spec: Mapping[str, Any], where: str) -> None:
    data_type = spec.get("DataType")
    if data_type is None:
        raise SnsError(
            "ValidationError",
            f"1 validation error detected: Value null at '{where}messageAttributes.{name}"
            ".member.dataType' failed to satisfy constraint: Member must not be null",
        )
    if not isinstance(data_type, str) or not ATTRIBUTE_TYPE.fullmatch(data_type):
        raise _refused(
            f"The message attribute '{name}' has an invalid message attribute type, the set "
            "of supported type prefixes is Binary, Number, and String."
        )
    kind = data_type.split(".", 1)[0]
    field = _FIELDS[kind]
    other = "BinaryValue" if field == "StringValue" else "StringValue"
    if spec.get(field) in _EMPTY:
        if spec.get(other) not in _EMPTY:  # given, but in the other type's field
            must = "Binary" if kind == "Binary" else "String"
            raise _refused(
                f"The message attribute '{name}' with type '{kind}' must use field '{must}'."
            )
        raise _refused(
            f"The message attribute '{name}' must contain non-empty message attribute value "
            f"for message attribute type '{kind}'."
        )


def sns_attributes(given: object, where: str = "") -> SentAttributes:
    """A publish's ``MessageAttributes``, held to SNS's rules (``where``: the entry's
    place in a batch, as SNS names it), read as SQS reads them."""
    if isinstance(given, dict):
        for name, spec in given.items():
            _check_name(name)
            if isinstance(spec, dict):
                _check_value(name, spec, where)
    return sent_attributes(given)


def message_size(body: str, attributes: SentAttributes) -> int:
    """The bytes SNS counts of a message: its body, and its attributes' names, types
    and values."""
    return len(body.encode()) + typed_size(attributes.typed)


def check_batch(entries: Sequence[Mapping[str, Any]]) -> None:
    """Refuse a whole batch one of whose messages has a malformed attribute, or whose
    messages together pass SNS's size."""
    total = 0
    for i, entry in enumerate(entries, 1):
        attributes = sns_attributes(
            entry.get("MessageAttributes"), f"publishBatchRequestEntries.{i}.member."
        )
        body = entry.get("Message")
        total += message_size(body if isinstance(body, str) else "", attributes)
    if total > MAX_SNS_MESSAGE_BYTES:
        raise SnsError(
            "BatchRequestTooLong",
            "The length of all the messages put together is more than the limit.",
        )
