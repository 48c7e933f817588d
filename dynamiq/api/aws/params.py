"""An action's parameters, read with SQS's own errors for what is missing or wrong (pure)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from dynamiq.api.aws.errors import AwsError
from dynamiq.errors import DynamiqError

__all__ = [
    "MAX_BATCH_ENTRIES",
    "SNS_BATCHES",
    "SQS_BATCHES",
    "BatchWords",
    "Params",
    "batch_entries",
    "checked_entries",
    "failure",
]

T = TypeVar("T")

MAX_BATCH_ENTRIES = 10
MAX_ENTRY_ID = 80
_ENTRY_ID = re.compile(rf"^[A-Za-z0-9_-]{{1,{MAX_ENTRY_ID}}}$")


class Params:
    """The JSON object an action was called with."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data

    def __contains__(self, name: str) -> bool:
        return self.data.get(name) is not None

    def text(self, name: str) -> str:
        """A required string."""
        value = self.data.get(name)
        if value is None:
            raise AwsError("MissingParameter", f"The request must contain the parameter {name}.")
        if not isinstance(value, str):
            raise invalid(name, value)
        return value

    def optional_text(self, name: str) -> str | None:
        return None if name not in self else self.text(name)

    def integer(self, name: str, default: int | None, lo: int, hi: int) -> int | None:
        """An integer in ``[lo, hi]``, or ``default`` when absent."""
        value = self.data.get(name)
        if value is None:
            return default
        if isinstance(value, str) and value.lstrip("-").isdigit():
            value = int(value)  # the query protocol sends every value as text
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            # AWS's words: "between 1 and 10" for a count, ">= 0 and <= 20" for seconds
            bounds = f">= {lo} and <= {hi}" if lo == 0 else f"between {lo} and {hi}"
            raise AwsError(
                "InvalidParameterValue",
                f"Value {value} for parameter {name} is invalid. "
                f"Reason: Must be {bounds}, if provided.",
            )
        return value

    def strings(self, name: str) -> list[str]:
        """A list of strings (empty when absent)."""
        value = self.data.get(name)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise invalid(name, value)
        return value

    def mapping(self, name: str) -> dict[str, Any]:
        """An object (empty when absent)."""
        value = self.data.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise invalid(name, value)
        return value


def invalid(name: str, value: object) -> AwsError:
    return AwsError("InvalidParameterValue", f"Value {value!r} for parameter {name} is invalid.")


@dataclass(frozen=True, slots=True)
class BatchWords:
    """How a service words its refusals of a batch's shape."""

    too_many: str = "Maximum number of entries per request are {limit}. You have sent {sent}."
    bad_id: str = (
        "A batch entry id can only contain alphanumeric characters, hyphens and "
        "underscores. It can be at most 80 letters long."
    )
    long_id: str = bad_id
    same_ids: str = "Two or more batch entries have the same Id."


SQS_BATCHES = BatchWords()
SNS_BATCHES = BatchWords(  # AWS's recorded answers
    "The batch request contains more entries than permissible.",
    "The Id of a batch entry in the batch request contains an impermissible character: {id}",
    "The Id of a batch entry in the batch request is too long: {id}",
    "Two or more batch entries in the request have the same Id.",
)


def batch_entries(
    params: Params, entry: str, name: str = "Entries", words: BatchWords = SQS_BATCHES
) -> list[dict[str, Any]]:
    """A batch's entries: 1 to 10 objects with distinct, well-formed ``Id`` s (``entry``:
    what the action's documentation calls one, ``SendMessageBatchRequestEntry``), refused
    in the service's ``words``."""
    entries = params.data.get(name)
    if entries is None or entries == []:
        raise AwsError("EmptyBatchRequest", f"There should be at least one {entry} in the request.")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise invalid(name, entries)
    if len(entries) > MAX_BATCH_ENTRIES:
        said = words.too_many.format(limit=MAX_BATCH_ENTRIES, sent=len(entries))
        raise AwsError("TooManyEntriesInBatchRequest", said)
    ids = [e.get("Id") for e in entries]
    for entry_id in ids:
        if not isinstance(entry_id, str) or not _ENTRY_ID.match(entry_id):
            long = isinstance(entry_id, str) and len(entry_id) > MAX_ENTRY_ID
            said = (words.long_id if long else words.bad_id).format(id=entry_id)
            raise AwsError("InvalidBatchEntryId", said)
    if len(set(ids)) != len(ids):
        raise AwsError("BatchEntryIdsNotDistinct", words.same_ids)
    return entries


def checked_entries(
    entries: list[dict[str, Any]],
    check: Callable[[Params], T],
    translate: Callable[[DynamiqError], AwsError],
) -> tuple[list[tuple[str, T]], list[dict[str, Any]]]:
    """Check each entry of a batch: one that does not pass fails alone (its item of the
    answer's ``Failed``, its error named by ``translate``); the others go on
    together, as ``(Id, what check made of it)``."""
    passed: list[tuple[str, T]] = []
    failed: list[dict[str, Any]] = []
    for entry in entries:
        try:
            passed.append((entry["Id"], check(Params(entry))))
        except DynamiqError as exc:
            failed.append(failure(entry["Id"], translate(exc)))
    return passed, failed


def failure(entry_id: str, error: AwsError) -> dict[str, Any]:
    """A batch answer's ``Failed`` item."""
    return {
        "Id": entry_id,
        "SenderFault": error.sender,
        "Code": error.code,
        "Message": error.message,
    }
