"""Queue policies as SQS keeps them: checked as the evaluator reads them, stored, shown
(pure, but for the two actions at the end).

A queue's ``Policy`` is its resource policy: ``api.aws.grants`` evaluates it for
every signed call on the queue, and a topic's delivery into a queue of another
application. ``AddPermission`` and ``RemovePermission`` edit the stored
``Policy`` as SQS does: one statement per label, the label as its ``Sid``.
"""

from __future__ import annotations

import json
from typing import Any

from dynamiq.access.policy import PolicyError, parse
from dynamiq.api.aws.call import Action, Call
from dynamiq.api.aws.errors import AwsError
from dynamiq.api.aws.params import Params

__all__ = [
    "POLICY_ACTIONS",
    "bad_value",
    "one_or_many",
    "permission_asked",
    "policy_document",
    "redrive_allow_policy",
    "statements_of",
]

_EFFECTS = ("Allow", "Deny")
_REDRIVE_PERMISSIONS = ("allowAll", "denyAll", "byQueue")
MAX_REDRIVE_SOURCES = 10


def bad_value(name: str, reason: str) -> AwsError:
    """SQS's refusal of an attribute's value."""
    return AwsError(
        "InvalidAttributeValue", f"Invalid value for the parameter {name}. Reason: {reason}."
    )


def _document(name: str, value: object) -> dict[str, Any]:
    try:
        document = json.loads(str(value))
    except ValueError:
        raise bad_value(name, "not a JSON document") from None
    if not isinstance(document, dict):
        raise bad_value(name, "not a JSON object")
    return document


def policy_document(name: str, value: object) -> str:
    """A ``Policy`` the evaluator reads as AWS does (``access.policy``): an unknown
    condition key or operator, or a statement without a principal, is refused here,
    never ignored when a request is decided."""
    document = _document(name, value)
    try:
        parse(document)
    except PolicyError as refused:
        raise bad_value(name, str(refused)) from None
    return str(value)


def redrive_allow_policy(name: str, value: object) -> str:
    """A ``RedriveAllowPolicy``: ``redrivePermission`` ``allowAll``, ``denyAll``, or
    ``byQueue`` with 1 to 10 ``sourceQueueArns``."""
    document = _document(name, value)
    permission = document.get("redrivePermission")
    if permission not in _REDRIVE_PERMISSIONS:
        raise bad_value(name, "redrivePermission must be allowAll, denyAll or byQueue")
    sources = document.get("sourceQueueArns")
    if permission == "byQueue":
        if (
            not isinstance(sources, list)
            or not 0 < len(sources) <= MAX_REDRIVE_SOURCES
            or not all(isinstance(arn, str) for arn in sources)
        ):
            raise bad_value(name, "byQueue needs 1 to 10 sourceQueueArns")
    elif sources is not None:
        raise bad_value(name, "sourceQueueArns go only with redrivePermission byQueue")
    return str(value)


def one_or_many(values: list[str]) -> str | list[str]:
    """One value as itself, several as a list (as SQS writes a statement)."""
    return values[0] if len(values) == 1 else values


def statements_of(policy: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A stored policy (checked when it was set; None: none yet) and its statements, a
    list whether it holds one or several."""
    document: dict[str, Any] = json.loads(policy) if policy else {}
    statements = document.get("Statement", [])
    return document, [statements] if isinstance(statements, dict) else statements


def with_permission(
    policy: str | None, arn: str, label: str, accounts: list[str], actions: list[str]
) -> str:
    """``policy`` (None: none yet) with a statement allowing ``accounts`` ``actions``."""
    document, statements = statements_of(policy)
    if any(s.get("Sid") == label for s in statements):
        raise AwsError(
            "InvalidParameterValue",
            f"Value {label} for parameter Label is invalid. Reason: Already exists.",
        )
    statement = {
        "Sid": label,
        "Effect": "Allow",
        "Principal": {"AWS": one_or_many([f"arn:aws:iam::{a}:root" for a in accounts])},
        "Action": one_or_many([f"SQS:{a}" for a in actions]),
        "Resource": arn,
    }
    document = {
        "Version": document.get("Version", "2008-10-17"),
        "Id": document.get("Id", f"{arn}/SQSDefaultPolicy"),
        **document,
        "Statement": [*statements, statement],
    }
    return json.dumps(document, separators=(",", ":"))


def without_permission(policy: str | None, label: str) -> str | None:
    """``policy`` without the statement labelled ``label`` (None: none is left)."""
    document, statements = statements_of(policy)
    kept = [s for s in statements if s.get("Sid") != label]
    if len(kept) == len(statements):
        raise AwsError(
            "InvalidParameterValue",
            f"Value {label} for parameter Label is invalid. Reason: can't find label.",
        )
    if not kept:
        return None
    return json.dumps({**document, "Statement": kept}, separators=(",", ":"))


async def _edit_policy(call: Call, policy: str | None) -> None:
    record = call.queue()
    kept = dict(record.settings.sqs_attributes or {})
    if policy is None:
        kept.pop("Policy", None)
    else:
        kept["Policy"] = policy
    await call.node.configure_queue(record.name, {"sqs_attributes": kept or None})


def permission_asked(
    params: Params, accounts_param: str, actions_param: str
) -> tuple[str, list[str], list[str]]:
    """An ``AddPermission``'s label, accounts and actions (SQS and SNS name the last two
    their own ways), each required."""
    label = params.text("Label")
    accounts, actions = params.strings(accounts_param), params.strings(actions_param)
    for given, param in ((accounts, accounts_param), (actions, actions_param)):
        if not given:
            raise AwsError("MissingParameter", f"The request must contain the parameter {param}.")
    return label, accounts, actions


async def add_permission(call: Call) -> dict[str, Any]:
    record = call.queue()
    label, accounts, actions = permission_asked(call.params, "AWSAccountIds", "Actions")
    current = (record.settings.sqs_attributes or {}).get("Policy")
    arn = call.queue_arn(record.name)
    await _edit_policy(call, with_permission(current, arn, label, accounts, actions))
    return {}


async def remove_permission(call: Call) -> dict[str, Any]:
    record = call.queue()
    label = call.params.text("Label")
    current = (record.settings.sqs_attributes or {}).get("Policy")
    await _edit_policy(call, without_permission(current, label))
    return {}


POLICY_ACTIONS: dict[str, Action] = {
    "AddPermission": add_permission,
    "RemovePermission": remove_permission,
}
