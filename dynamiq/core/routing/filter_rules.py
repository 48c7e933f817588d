"""The match values of a filter policy: what one key's list may hold, compiled (pure).

A key of a policy lists its match values; a message passes the key when one
of them matches. Each is tested against every value the message holds at
the key (a ``String.Array`` attribute's elements, a body's array items), and
matches when one of those does:

- ``"text"``, ``12.5``, ``true``, ``null``: that value, of that type
  (numbers compare to five decimal places, so ``5`` is ``5.0``);
- ``{"prefix": "eu-"}``, ``{"suffix": ".png"}``, ``{"equals-ignore-case": "Red"}``;
- ``{"anything-but": ...}``: a value that is none of the values given (one,
  or a list), or that does not start (``{"prefix": ...}``) or end
  (``{"suffix": ...}``) so;
- ``{"numeric": [">=", 10, "<", 20]}``: a number within the bounds (``=``,
  one comparison, or a lower then an upper bound);
- ``{"exists": true}`` / ``{"exists": false}``: the key holds a value, or none;
- ``{"cidr": "10.0.0.0/24"}``: a text that is an IP address in that network.

A refusal is ``Invalid`` with the reason in SNS's words, as SNS says it
after ``FilterPolicy:``.
"""

from __future__ import annotations

import ipaddress
import json
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any, TypeGuard

from dynamiq.errors import Invalid

__all__ = ["Check", "Value", "compile_values", "fixed", "refuse"]

# What a message holds at a key: JSON's scalars (a body's ``null`` is None).
Value = str | int | float | bool | None
# Given every value a message holds at the key (none: the key is absent).
Check = Callable[[Sequence[Value]], bool]

_STRING_OPERATORS = ("prefix", "suffix", "equals-ignore-case")
_LOWER: dict[str, Callable[[int, int], bool]] = {">": operator.gt, ">=": operator.ge}
_UPPER: dict[str, Callable[[int, int], bool]] = {"<": operator.lt, "<=": operator.le}
_COMPARE = {"=": operator.eq, **_LOWER, **_UPPER}


def refuse(reason: str, field: str = "filter") -> Invalid:
    """A refused policy, in SNS's words."""
    return Invalid(reason, field)


def is_number(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is a finite JSON number (not a boolean: JSON's ``Infinity`` and
    ``NaN``, and a literal too large for a float, are no numbers here)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def fixed(number: float) -> int:
    """A number as filters compare it: to five decimal places."""
    if isinstance(number, int) or abs(number) >= 1e15:  # no fraction left to round
        return int(number) * 100_000
    return round(number * 100_000)


def _said(value: object) -> str:
    """A value as SNS names it in a refusal (as it stood in the JSON)."""
    return value if isinstance(value, str) else json.dumps(value)


def compile_values(given: Sequence[object]) -> Check:
    """One key's match values: a message passes it when one of them matches."""
    checks = [_compile(one) for one in given]
    if len(checks) == 1:
        return checks[0]
    return lambda values: any(check(values) for check in checks)


def _compile(given: object) -> Check:
    if isinstance(given, dict):
        return _expression(given)
    if isinstance(given, str | bool) or given is None or is_number(given):
        return _any(_equal(given))
    raise refuse("Match value must be String, number, true, false, or null")


def _any(test: Callable[[Value], bool]) -> Check:
    return lambda values: any(test(v) for v in values)


def _equal(expected: Value) -> Callable[[Value], bool]:
    if is_number(expected):
        point = fixed(expected)
        return lambda v: is_number(v) and fixed(v) == point
    if isinstance(expected, bool) or expected is None:
        return lambda v: v is expected
    return lambda v: isinstance(v, str) and v == expected


def _expression(given: dict[Any, Any]) -> Check:
    if len(given) != 1:
        raise refuse("Only one key allowed in match expression")
    ((kind, arg),) = given.items()
    if kind in _STRING_OPERATORS:
        return _any(_string_test(kind, arg))
    if kind == "exists":
        if not isinstance(arg, bool):
            raise refuse("exists match pattern must be either true or false.")
        return (lambda values: bool(values)) if arg else (lambda values: not values)
    if kind == "anything-but":
        return _anything_but(arg)
    if kind == "numeric":
        return _any(_numeric(arg))
    if kind == "cidr":
        return _any(_cidr(arg))
    raise refuse(f"Unrecognized match type {kind}")


def _string_test(kind: str, arg: object) -> Callable[[Value], bool]:
    if not isinstance(arg, str):
        raise refuse(f"{kind} match pattern must be a string")
    if kind == "prefix":
        return lambda v: isinstance(v, str) and v.startswith(arg)
    if kind == "suffix":
        return lambda v: isinstance(v, str) and v.endswith(arg)
    folded = arg.casefold()
    return lambda v: isinstance(v, str) and v.casefold() == folded


def _anything_but(arg: object) -> Check:
    """A value the message holds that is none of these (that does not start or end so)."""
    if isinstance(arg, dict):
        if len(arg) != 1:
            raise refuse("Only one key allowed in match expression")
        ((kind, pattern),) = arg.items()
        if kind not in ("prefix", "suffix"):
            raise refuse(f"Unsupported anything-but pattern: {kind}")
        fits = _string_test(kind, pattern)
        return _any(lambda v: isinstance(v, str) and not fits(v))
    listed = arg if isinstance(arg, list) else [arg]
    if not listed:
        raise refuse("Empty arrays are not allowed")
    tests = []
    for one in listed:
        if not (isinstance(one, str | bool) or one is None or is_number(one)):
            raise refuse("Match value must be String, number, true, false, or null")
        tests.append(_equal(one))
    return _any(lambda v: not any(test(v) for test in tests))


def _numeric(arg: object) -> Callable[[Value], bool]:
    """Comparisons of a number: ``["=", n]``, ``[op, n]``, or a lower then an upper bound."""
    if not isinstance(arg, list) or not arg:
        raise refuse("Invalid member in numeric match: ]")
    op, *rest = arg
    if not isinstance(op, str):
        raise refuse(f"Invalid member in numeric match: {_said(op)}")
    if op not in _COMPARE:
        raise refuse(f"Unrecognized numeric range operator: {op}")
    bound = _bound(op, rest)
    checks = [(_COMPARE[op], bound)]
    if len(rest) > 1:
        if op not in _LOWER:
            raise refuse("Too many elements in numeric expression")
        top_op = rest[1]
        if not isinstance(top_op, str):
            raise refuse(f"Bad value in numeric range: {_said(top_op)}")
        if top_op not in _UPPER:
            raise refuse(f"Bad numeric range operator: {top_op}")
        top = _bound(top_op, rest[2:])
        if top <= bound:
            raise refuse("Bottom must be less than top")
        if len(rest) > 3:
            raise refuse("Too many terms in numeric range expression")
        checks.append((_UPPER[top_op], top))
    return lambda v: is_number(v) and all(compare(fixed(v), b) for compare, b in checks)


def _bound(op: str, rest: list[Any]) -> int:
    """The number after ``op`` (``rest`` starts with it), as compared."""
    if not rest or not is_number(rest[0]):
        raise refuse(f"Value of {'equals' if op == '=' else op} must be numeric")
    return fixed(rest[0])


def _cidr(arg: object) -> Callable[[Value], bool]:
    if not isinstance(arg, str):
        raise refuse("prefix match pattern must be a string")  # as SNS answers it
    address, slash, mask = arg.partition("/")
    if not slash or "/" in mask:
        raise refuse("Malformed CIDR, one '/' required")
    if not mask.isdigit():
        raise refuse("Malformed CIDR, mask bits must be an integer")
    try:
        network = ipaddress.ip_network(arg, strict=False)
    except ValueError:
        raise refuse(f"Nonstandard IP address: {address}") from None

    def inside(v: Value) -> bool:
        if not isinstance(v, str):
            return False
        try:
            return ipaddress.ip_address(v) in network
        except ValueError:
            return False

    return inside
