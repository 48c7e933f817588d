"""Filter policies on message attributes, as SNS subscriptions have them (pure).

A policy maps attribute names to conditions; a message matches when every
name's conditions match (AND), and a name's conditions match when any one
does (OR). A name takes one condition or a list of them:

- ``"text"`` or ``12.5``: the attribute is that string, or that number
  (a string never equals a number);
- ``{"prefix": "eu-"}``: a string attribute starting so;
- ``{"anything-but": [...]}`` (or one value): the attribute is there and is
  none of those;
- ``{"numeric": [">=", 10, "<", 20]}``: a number attribute within the
  bounds (``=``, or one or two of ``>``/``>=`` then ``<``/``<=``);
- ``{"exists": true}`` / ``{"exists": false}``: the attribute is there, or not.

Bytes attributes take no part in filtering: to a policy they are absent.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

from dynamiq.errors import Invalid
from dynamiq.models import AttributeValue

__all__ = ["MAX_CONDITIONS", "MAX_FILTER_KEYS", "FilterPolicy"]

MAX_FILTER_KEYS = 16
MAX_CONDITIONS = 100
_MISSING = object()

Condition = Callable[[object], bool]  # given the attribute's value, or _MISSING

_LOWER = {">": operator.gt, ">=": operator.ge}
_UPPER = {"<": operator.lt, "<=": operator.le}


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal(expected: str | float) -> Condition:
    if isinstance(expected, str):
        return lambda v: isinstance(v, str) and v == expected
    return lambda v: _is_number(v) and v == expected


class FilterPolicy:
    """A compiled filter policy; ``spec`` is the JSON it came from."""

    def __init__(self, spec: dict[str, Any]) -> None:
        if not isinstance(spec, dict) or not spec:
            raise Invalid("filter must be an object naming at least one attribute", "filter")
        if len(spec) > MAX_FILTER_KEYS:
            raise Invalid(f"filter names at most {MAX_FILTER_KEYS} attributes", "filter")
        self.spec = spec
        self._keys = [(name, _conditions(name, given)) for name, given in spec.items()]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FilterPolicy) and other.spec == self.spec

    def __hash__(self) -> int:
        return hash(json.dumps(self.spec, sort_keys=True))

    def anchor(self) -> tuple[str, list[str | int | float]] | None:
        """An attribute whose conditions are all exact values, with those values:
        a message passes only if it carries one of them there, so a topic can
        index its filters by them. None when no attribute is tested that way."""
        for name, given in self.spec.items():
            values = given if isinstance(given, list) else [given]
            if all(isinstance(v, str) or _is_number(v) for v in values):
                return name, values
        return None

    def matches(self, attributes: Mapping[str, AttributeValue] | None) -> bool:
        """Whether a message with ``attributes`` passes."""
        found = attributes or {}
        for name, conditions in self._keys:
            value = found.get(name, _MISSING)
            if isinstance(value, bytes):
                value = _MISSING
            if not any(condition(value) for condition in conditions):
                return False
        return True


def _conditions(name: str, given: object) -> list[Condition]:
    field = f"filter.{name}"
    listed = given if isinstance(given, list) else [given]
    if not listed or len(listed) > MAX_CONDITIONS:
        raise Invalid(f"{field} takes 1 to {MAX_CONDITIONS} conditions", field)
    return [_condition(field, one) for one in listed]


def _condition(field: str, given: object) -> Condition:
    if isinstance(given, str) or _is_number(given):
        return _equal(given)
    if not isinstance(given, dict) or len(given) != 1:
        raise Invalid(
            f"{field}: a condition is a string, a number, or an object with one of "
            "prefix, anything-but, numeric, exists",
            field,
        )
    ((kind, arg),) = given.items()
    if kind == "prefix" and isinstance(arg, str):
        return lambda v: isinstance(v, str) and v.startswith(arg)
    if kind == "exists" and isinstance(arg, bool):
        return (lambda v: v is not _MISSING) if arg else (lambda v: v is _MISSING)
    if kind == "anything-but":
        return _anything_but(field, arg)
    if kind == "numeric":
        return _numeric(field, arg)
    raise Invalid(
        f"{field}: {kind!r} is not a condition here (prefix takes text, exists true or "
        "false, anything-but values, numeric comparisons)",
        field,
    )


def _anything_but(field: str, arg: object) -> Condition:
    values: list[object] = arg if isinstance(arg, list) else [arg]
    plain = [v for v in values if isinstance(v, str) or _is_number(v)]
    if not values or len(plain) < len(values):
        raise Invalid(f"{field}: anything-but takes strings and numbers", field)
    excluded = [_equal(v) for v in plain]
    return lambda v: v is not _MISSING and not any(e(v) for e in excluded)


def _numeric(field: str, arg: object) -> Condition:
    rule = (
        f'{field}: numeric takes ["=", n], or [">" or ">=", n], ["<" or "<=", n], '
        "or a lower then an upper bound"
    )
    if not isinstance(arg, list) or len(arg) not in (2, 4):
        raise Invalid(rule, field)
    pairs: list[tuple[object, object]] = [(arg[i], arg[i + 1]) for i in range(0, len(arg), 2)]
    (op, bound), *_ = pairs
    if len(pairs) == 1 and op == "=" and _is_number(bound):
        return _equal(bound)
    allowed = [{**_LOWER, **_UPPER}] if len(pairs) == 1 else [_LOWER, _UPPER]
    checks: list[tuple[Callable[[Any, Any], bool], float]] = []
    for (op, bound), ops in zip(pairs, allowed, strict=True):
        if not (isinstance(op, str) and op in ops and _is_number(bound)):
            raise Invalid(rule, field)
        checks.append((ops[op], bound))
    return lambda v: _is_number(v) and all(compare(v, b) for compare, b in checks)
