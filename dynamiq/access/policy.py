"""IAM-style policies, read and evaluated as AWS evaluates them for SQS and SNS (pure).

A policy is a JSON document of statements, each an ``Effect`` (``Allow`` or
``Deny``) over actions (``Action`` or ``NotAction``: ``sqs:SendMessage``,
``sqs:Send*``, ``*``), resources (``Resource`` or ``NotResource``: ARNs with
``*`` and ``?``), principals (``Principal`` or ``NotPrincipal``, in a queue's or
a topic's own policy: ``*``, an account, ``arn:aws:iam::<account>:root``, a
key's ARN, ``{"Service": "sns.amazonaws.com"}``) and conditions.

``evaluate`` decides one request as AWS does: an explicit ``Deny`` anywhere
wins; otherwise, within one account, an ``Allow`` in the caller's identity
policy or in the resource's policy lets it in; across accounts both must
allow it; nothing allowing it is a deny.

``parse`` refuses what this evaluator would not read as AWS reads it: an
unknown condition key or operator is refused when the policy is set, never
ignored when it is evaluated.
"""

from __future__ import annotations

import datetime
import enum
import fnmatch
import functools
import ipaddress
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CONDITION_KEYS",
    "Decision",
    "Policy",
    "PolicyError",
    "Request",
    "Statement",
    "evaluate",
    "parse",
]

_EFFECTS = ("Allow", "Deny")
# The request context's keys a condition may name (AWS's are case-insensitive).
CONDITION_KEYS = frozenset(
    {
        "aws:sourcearn",
        "aws:sourceaccount",
        "aws:sourceowner",
        "aws:securetransport",
        "aws:sourceip",
        "aws:currenttime",
        "aws:epochtime",
        "aws:principalaccount",
        "aws:principalarn",
        "aws:principaltype",
        "aws:useragent",
    }
)
VERSIONS = ("2012-10-17", "2008-10-17")
_KNOWN_TOP = frozenset({"Version", "Id", "Statement"})
_KNOWN_STATEMENT = frozenset(
    {
        "Sid",
        "Effect",
        "Principal",
        "NotPrincipal",
        "Action",
        "NotAction",
        "Resource",
        "NotResource",
        "Condition",
    }
)


class PolicyError(ValueError):
    """Raised by ``parse`` for a document it refuses; the text says why."""


class Decision(enum.Enum):
    """What ``evaluate`` decided."""

    ALLOW = "allow"
    EXPLICIT_DENY = "explicit"  # a Deny statement matched
    IMPLICIT_DENY = "implicit"  # nothing allowed it


@dataclass(frozen=True, slots=True)
class Request:
    """One request as policies see it: who asks (an account and an ARN, or a service),
    the action, the resource's ARN, and the context's keys (lower-case names)."""

    action: str  # "sqs:SendMessage"
    resource: str  # the resource's ARN
    account: str | None  # the caller's account; None for a service (``service``)
    principal_arn: str | None = None
    service: str | None = None  # "sns.amazonaws.com" for a topic's delivery
    context: Mapping[str, str] = field(default_factory=dict)


# -- reading ---------------------------------------------------------------------------


def _strings(value: object, what: str) -> tuple[str, ...]:
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, str) and v for v in values):
        raise PolicyError(f"{what} must be a string or a list of strings")
    return tuple(values)


@dataclass(frozen=True, slots=True)
class _Principals:
    """A ``Principal``: every caller (``*``), or accounts, ARNs and services."""

    anyone: bool = False
    aws: tuple[str, ...] = ()
    services: tuple[str, ...] = ()

    @classmethod
    def read(cls, value: object) -> _Principals:
        if value == "*":
            return cls(anyone=True)
        if not isinstance(value, dict) or not value:
            raise PolicyError('Principal must be "*" or an object of AWS or Service principals')
        unknown = set(value) - {"AWS", "Service"}
        if unknown:
            raise PolicyError(f"Principal {sorted(unknown)[0]!r} is not supported")
        aws = _strings(value["AWS"], "Principal AWS") if "AWS" in value else ()
        services = _strings(value["Service"], "Principal Service") if "Service" in value else ()
        for name in aws:
            if name != "*" and not _ACCOUNT.fullmatch(name) and not _IAM_ARN.fullmatch(name):
                raise PolicyError(f"Principal {name!r} is not an account or an IAM ARN")
        return cls("*" in aws, aws, services)

    def match(self, request: Request) -> bool:
        if self.anyone:
            return True
        if request.service is not None:
            return request.service in self.services
        for name in self.aws:
            if name in (request.account, request.principal_arn):
                return True
            if name == f"arn:aws:iam::{request.account}:root":
                return True
        return False


_ACCOUNT = re.compile(r"\d{12}")
_IAM_ARN = re.compile(r"arn:aws:iam::\d{12}:(root|user/.+|role/.+)")


@dataclass(frozen=True, slots=True)
class _Condition:
    """One operator over one key: ``{"StringEquals": {"aws:SourceAccount": "…"}}``."""

    operator: str  # the base operator, e.g. "StringLike"
    key: str  # lower-case
    values: tuple[str, ...]
    if_exists: bool
    quantifier: str | None  # "ForAnyValue", "ForAllValues" or None

    def match(self, context: Mapping[str, str]) -> bool:
        given = context.get(self.key)
        test = _OPERATORS[self.operator]
        if self.operator == "Null":  # "true": the key is absent
            return (given is None) == (self.values[0].lower() == "true")
        if given is None:  # AWS: true for IfExists, ForAllValues and the negated operators
            return self.if_exists or self.quantifier == "ForAllValues" or "Not" in self.operator
        return test(given, self.values)


def _read_conditions(value: object) -> tuple[_Condition, ...]:
    if not isinstance(value, dict):
        raise PolicyError("Condition must be an object of operators")
    read = []
    for operator, keys in value.items():
        quantifier, _, base = operator.rpartition(":")
        base, if_exists = (
            (base[: -len("IfExists")], True) if base.endswith("IfExists") else (base, False)
        )
        if base not in _OPERATORS or quantifier not in ("", "ForAnyValue", "ForAllValues"):
            raise PolicyError(f"Condition operator {operator!r} is not supported")
        if not isinstance(keys, dict) or not keys:
            raise PolicyError(f"Condition {operator} must be an object of keys")
        for key, values in keys.items():
            if key.lower() not in CONDITION_KEYS:
                raise PolicyError(f"Condition key {key!r} is not supported")
            texts = tuple(
                str(v).lower() if isinstance(v, bool) else str(v)
                for v in (values if isinstance(values, list) else [values])
            )
            if not texts:
                raise PolicyError(f"Condition {operator} {key} has no value")
            _check_values(base, texts, key)
            read.append(_Condition(base, key.lower(), texts, if_exists, quantifier or None))
    return tuple(read)


def _check_values(operator: str, values: tuple[str, ...], key: str) -> None:
    for value in values:
        try:
            if operator in ("IpAddress", "NotIpAddress"):
                ipaddress.ip_network(value, strict=False)
            elif operator.startswith("Date"):
                _instant(value)
            elif operator.startswith("Numeric"):
                float(value)
        except ValueError:
            raise PolicyError(f"Condition {operator} {key}: {value!r} is not valid") from None
        if operator in ("Bool", "Null") and value.lower() not in ("true", "false"):
            raise PolicyError(f"Condition {operator} {key}: {value!r} is not true or false")


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement, read."""

    allow: bool
    actions: tuple[str, ...]
    not_actions: bool
    resources: tuple[str, ...] | None  # None: no Resource (it applies to the one it is on)
    not_resources: bool
    principals: _Principals | None  # None: no Principal (an identity policy's)
    not_principals: bool
    conditions: tuple[_Condition, ...]
    sid: str | None = None

    def applies(self, request: Request) -> bool:
        if _matches_any(self.actions, request.action, _action_pattern) == self.not_actions:
            return False
        if self.resources is not None:
            hit = _matches_any(self.resources, request.resource, _arn_pattern)
            if hit == self.not_resources:
                return False
        if self.principals is not None and self.principals.match(request) == self.not_principals:
            return False
        return all(c.match(request.context) for c in self.conditions)


def _read_statement(value: object, resource_policy: bool) -> Statement:
    if not isinstance(value, dict):
        raise PolicyError("each statement must be an object")
    unknown = set(value) - _KNOWN_STATEMENT
    if unknown:
        raise PolicyError(f"statement field {sorted(unknown)[0]!r} is not supported")
    if value.get("Effect") not in _EFFECTS:
        raise PolicyError("each statement needs an Effect of Allow or Deny")
    actions_key = _one_of(value, "Action", "NotAction", required=True) or "Action"
    resources_key = _one_of(value, "Resource", "NotResource", required=False)
    principals_key = _one_of(value, "Principal", "NotPrincipal", required=resource_policy)
    if principals_key is not None and not resource_policy:
        raise PolicyError("an identity policy names no Principal")
    return Statement(
        value["Effect"] == "Allow",
        _strings(value[actions_key], actions_key),
        actions_key == "NotAction",
        None if resources_key is None else _strings(value[resources_key], resources_key),
        resources_key == "NotResource",
        None if principals_key is None else _Principals.read(value[principals_key]),
        principals_key == "NotPrincipal",
        _read_conditions(value["Condition"]) if "Condition" in value else (),
        str(value["Sid"]) if "Sid" in value else None,
    )


def _one_of(value: Mapping[str, Any], name: str, negated: str, *, required: bool) -> str | None:
    if name in value and negated in value:
        raise PolicyError(f"a statement has {name} or {negated}, not both")
    found = name if name in value else negated if negated in value else None
    if found is None and required:
        raise PolicyError(f"each statement needs a {name} or a {negated}")
    return found


@dataclass(frozen=True, slots=True)
class Policy:
    """A policy document, read: its statements."""

    statements: tuple[Statement, ...]
    # Whether a statement has conditions (else the request's context is not read).
    conditional: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "conditional", any(s.conditions for s in self.statements))


def parse(document: str | Mapping[str, Any], *, resource_policy: bool = True) -> Policy:
    """Read a policy (a resource's own, with principals; else an identity policy).

    Raises:
        PolicyError: the document is not one this evaluator reads as AWS does.
    """
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except ValueError:
            raise PolicyError("the policy is not a JSON document") from None
    if not isinstance(document, Mapping):
        raise PolicyError("the policy is not a JSON object")
    unknown = set(document) - _KNOWN_TOP
    if unknown:
        raise PolicyError(f"policy field {sorted(unknown)[0]!r} is not supported")
    if document.get("Version", VERSIONS[0]) not in VERSIONS:
        raise PolicyError(f"Version must be {' or '.join(VERSIONS)}")
    if not isinstance(document.get("Id", ""), str):
        raise PolicyError("Id must be a string")
    statements = document.get("Statement")
    if isinstance(statements, dict):
        statements = [statements]
    if not isinstance(statements, list) or not statements:
        raise PolicyError("a policy needs a Statement")
    return Policy(tuple(_read_statement(s, resource_policy) for s in statements))


# -- deciding --------------------------------------------------------------------------


def evaluate(
    request: Request,
    identity: Sequence[Policy],
    resource: Policy | None,
    *,
    same_account: bool,
) -> Decision:
    """Decide ``request`` under the caller's ``identity`` policies and the resource's own
    (None: it has none)."""
    allowed_by = {"identity": False, "resource": False}
    for where, policies in (("identity", identity), ("resource", [resource] if resource else [])):
        for policy in policies:
            for statement in policy.statements:
                if not statement.applies(request):
                    continue
                if not statement.allow:
                    return Decision.EXPLICIT_DENY
                allowed_by[where] = True
    if request.service is not None:  # a service has no identity policy of ours
        allowed = allowed_by["resource"]
    elif same_account:
        allowed = allowed_by["identity"] or allowed_by["resource"]
    else:
        allowed = allowed_by["identity"] and allowed_by["resource"]
    return Decision.ALLOW if allowed else Decision.IMPLICIT_DENY


def _matches_any(
    patterns: tuple[str, ...], value: str, compile_: Callable[[str], re.Pattern[str]]
) -> bool:
    return _any_of(patterns, compile_).fullmatch(value) is not None


@functools.lru_cache(maxsize=4096)
def _any_of(
    patterns: tuple[str, ...], compile_: Callable[[str], re.Pattern[str]]
) -> re.Pattern[str]:
    """One pattern matching what any of ``patterns`` matches (one match a statement)."""
    compiled = [compile_(p) for p in patterns]
    return re.compile("|".join(f"(?:{c.pattern})" for c in compiled), compiled[0].flags)


@functools.lru_cache(maxsize=4096)
def _action_pattern(pattern: str) -> re.Pattern[str]:
    """An action's pattern (``SQS:Send*``): the service and the name, any case."""
    return re.compile(fnmatch.translate(pattern).removesuffix(r"\Z"), re.IGNORECASE)


@functools.lru_cache(maxsize=4096)
def _arn_pattern(pattern: str) -> re.Pattern[str]:
    """A resource's pattern: ``*`` and ``?`` wildcards, the rest as it is."""
    escaped = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(escaped, re.DOTALL)


# -- the operators -----------------------------------------------------------------------


def _instant(value: str) -> float:
    """A date condition's value: epoch seconds, or an ISO 8601 time (UTC unless said)."""
    try:
        return float(value)
    except ValueError:
        pass
    moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def _in_network(given: str, values: Sequence[str]) -> bool:
    try:
        address = ipaddress.ip_address(given)
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(v, strict=False) for v in values)


def _like(given: str, values: Sequence[str]) -> bool:
    return any(_arn_pattern(v).fullmatch(given) for v in values)


def _compared(
    read: Callable[[str], float], compare: Callable[[float, float], bool]
) -> Callable[[str, Sequence[str]], bool]:
    """An operator comparing the context's value with the condition's, both ``read``
    (a value that does not read is no match; the condition's were checked when set)."""

    def test(given: str, values: Sequence[str]) -> bool:
        try:
            value = read(given)
        except ValueError:
            return False
        return any(compare(value, read(v)) for v in values)

    return test


def _dates(compare: Callable[[float, float], bool]) -> Callable[[str, Sequence[str]], bool]:
    return _compared(_instant, compare)


def _numbers(compare: Callable[[float, float], bool]) -> Callable[[str, Sequence[str]], bool]:
    return _compared(float, compare)


def _negated(test: Callable[[str, Sequence[str]], bool]) -> Callable[[str, Sequence[str]], bool]:
    return lambda given, values: not test(given, values)


def _equals(given: str, values: Sequence[str]) -> bool:
    return given in values


def _equals_ignoring_case(given: str, values: Sequence[str]) -> bool:
    return given.lower() in (v.lower() for v in values)


_OPERATORS: dict[str, Callable[[str, Sequence[str]], bool]] = {
    "StringEquals": _equals,
    "StringNotEquals": _negated(_equals),
    "StringEqualsIgnoreCase": _equals_ignoring_case,
    "StringNotEqualsIgnoreCase": _negated(_equals_ignoring_case),
    "StringLike": _like,
    "StringNotLike": _negated(_like),
    "ArnEquals": _like,  # AWS: ArnEquals takes wildcards as ArnLike does
    "ArnLike": _like,
    "ArnNotEquals": _negated(_like),
    "ArnNotLike": _negated(_like),
    "IpAddress": _in_network,
    "NotIpAddress": _negated(_in_network),
    "Bool": _equals_ignoring_case,
    "DateEquals": _dates(lambda a, b: a == b),
    "DateNotEquals": _dates(lambda a, b: a != b),
    "DateLessThan": _dates(lambda a, b: a < b),
    "DateLessThanEquals": _dates(lambda a, b: a <= b),
    "DateGreaterThan": _dates(lambda a, b: a > b),
    "DateGreaterThanEquals": _dates(lambda a, b: a >= b),
    "NumericEquals": _numbers(lambda a, b: a == b),
    "NumericNotEquals": _numbers(lambda a, b: a != b),
    "NumericLessThan": _numbers(lambda a, b: a < b),
    "NumericLessThanEquals": _numbers(lambda a, b: a <= b),
    "NumericGreaterThan": _numbers(lambda a, b: a > b),
    "NumericGreaterThanEquals": _numbers(lambda a, b: a >= b),
    "Null": _equals,  # decided in ``_Condition.match``
}
