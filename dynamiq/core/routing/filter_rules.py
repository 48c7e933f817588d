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

A refusal is ``Refused`` (an ``Invalid``) with the reason in SNS's words, as
SNS says it after ``FilterPolicy:``, and where SNS's parser stood then.
"""

from __future__ import annotations

import ipaddress
import json
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any, TypeGuard

from dynamiq.core.routing.places import Path, Place
from dynamiq.errors import Invalid

__all__ = ["Check", "Refused", "Value", "compile_values", "fixed", "refuse"]

# What a message holds at a key: JSON's scalars (a body's ``null`` is None).
Value = str | int | float | bool | None
# Given every value a message holds at the key (none: the key is absent).
Check = Callable[[Sequence[Value]], bool]

_STRING_OPERATORS = ("prefix", "suffix", "equals-ignore-case")
_LOWER: dict[str, Callable[[int, int], bool]] = {">": operator.gt, ">=": operator.ge}
_UPPER: dict[str, Callable[[int, int], bool]] = {"<": operator.lt, "<=": operator.le}
_COMPARE = {"=": operator.eq, **_LOWER, **_UPPER}


class Refused(Invalid):
    """A refused policy, in SNS's words; ``at``: where SNS's parser stood then
    (``places``), None where SNS names no place."""

    def __init__(self, reason: str, at: Place | None = None, field: str | None = "filter") -> None:
        super().__init__(reason, field)
        self.at = at


def refuse(reason: str, at: Place | None = None, field: str | None = "filter") -> Refused:
    """A refused policy, in SNS's words, the parser at ``at``."""
    return Refused(reason, at, field)


def _next(path: Path, items: Sequence[object], index: int) -> Place:
    """Where the parser stands once it reads the token after ``items[index - 1]``: the
    item at ``index``, or the end of the array."""
    return ((*path, index), "open") if index < len(items) else (path, "done")


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


def compile_values(given: Sequence[object], path: Path = ()) -> Check:
    """One key's match values (the list at ``path`` of the policy): a message passes it
    when one of them matches."""
    checks = [_compile(one, (*path, i)) for i, one in enumerate(given)]
    if len(checks) == 1:
        return checks[0]
    return lambda values: any(check(values) for check in checks)


def _compile(given: object, path: Path) -> Check:
    if isinstance(given, dict):
        return _expression(given, path)
    if isinstance(given, str | bool) or given is None or is_number(given):
        return _any(_equal(given))
    raise refuse("Match value must be String, number, true, false, or null", (path, "open"))


def _any(test: Callable[[Value], bool]) -> Check:
    return lambda values: any(test(v) for v in values)


def _equal(expected: Value) -> Callable[[Value], bool]:
    if is_number(expected):
        point = fixed(expected)
        return lambda v: is_number(v) and fixed(v) == point
    if isinstance(expected, bool) or expected is None:
        return lambda v: v is expected
    return lambda v: isinstance(v, str) and v == expected


def _expression(given: dict[Any, Any], path: Path) -> Check:
    """One match expression: its first key read whole before any other is looked at,
    as SNS reads it."""
    if not given:
        raise refuse("Match expression name not found", (path, "done"))
    kind, *others = given
    arg, at = given[kind], (*path, kind)
    check: Check
    if kind in _STRING_OPERATORS:
        check = _any(_string_test(kind, arg, at))
    elif kind == "exists":
        if not isinstance(arg, bool):
            raise refuse("exists match pattern must be either true or false.", (at, "open"))
        check = (lambda values: bool(values)) if arg else (lambda values: not values)
    elif kind == "anything-but":
        check = _anything_but(arg, at)
    elif kind == "numeric":
        check = _any(_numeric(arg, at))
    elif kind == "cidr":
        if not isinstance(arg, str):
            raise refuse("prefix match pattern must be a string", (at, "open"))  # as SNS says
        check = _any(_cidr(arg))
    else:
        raise refuse(f"Unrecognized match type {kind}", (at, "open"))
    if others:
        extra: Place = ((*path, others[0]), "open")
        if kind in ("numeric", "anything-but"):
            raise refuse("Too many elements in numeric expression", extra)
        raise refuse("Only one key allowed in match expression", extra)
    return check


def _string_test(kind: str, arg: object, path: Path) -> Callable[[Value], bool]:
    if not isinstance(arg, str):
        raise refuse(f"{kind} match pattern must be a string", (path, "open"))
    if kind == "prefix":
        return lambda v: isinstance(v, str) and v.startswith(arg)
    if kind == "suffix":
        return lambda v: isinstance(v, str) and v.endswith(arg)
    folded = arg.casefold()
    return lambda v: isinstance(v, str) and v.casefold() == folded


def _anything_but(arg: object, path: Path) -> Check:
    """A value the message holds that is none of these (that does not start or end so)."""
    if isinstance(arg, dict):
        if not arg:
            raise refuse("Anything-But expression name not found", (path, "done"))
        kind, *others = arg
        if kind not in ("prefix", "suffix"):
            raise refuse(f"Unsupported anything-but pattern: {kind}", ((*path, kind), "open"))
        fits = _string_test(kind, arg[kind], (*path, kind))
        if others:
            extra: Place = ((*path, others[0]), "open")
            raise refuse("Only one key allowed in match expression", extra)
        return _any(lambda v: isinstance(v, str) and not fits(v))
    listed = arg if isinstance(arg, list) else [arg]
    if not listed:
        raise refuse("Empty arrays are not allowed", (path, "done"))
    tests = []
    for i, one in enumerate(listed):
        if not (isinstance(one, str | bool) or one is None or is_number(one)):
            at: Place = ((*path, i), "open") if listed is arg else (path, "open")
            raise refuse("Match value must be String, number, true, false, or null", at)
        tests.append(_equal(one))
    return _any(lambda v: not any(test(v) for test in tests))


def _numeric(arg: object, path: Path) -> Callable[[Value], bool]:
    """Comparisons of a number: ``["=", n]``, ``[op, n]``, or a lower then an upper
    bound, refused where SNS's parser stands when it finds what is wrong."""
    if not isinstance(arg, list):
        raise refuse("Value of numeric must be an array.", (path, "open"))
    if not arg:
        raise refuse("Invalid member in numeric match: ]", (path, "done"))
    op = arg[0]
    if not isinstance(op, str):
        raise refuse(f"Invalid member in numeric match: {_said(op)}", ((*path, 0), "open"))
    if op not in _COMPARE:
        raise refuse(f"Unrecognized numeric range operator: {op}", _next(path, arg, 1))
    bound = _bound(op, arg, 1, path)
    checks = [(_COMPARE[op], bound)]
    if len(arg) > 2:
        if op not in _LOWER:
            raise refuse("Too many elements in numeric expression", ((*path, 2), "open"))
        top_op = arg[2]
        if not isinstance(top_op, str):
            raise refuse(f"Bad value in numeric range: {_said(top_op)}", ((*path, 2), "open"))
        if top_op not in _UPPER:
            raise refuse(f"Bad numeric range operator: {top_op}", ((*path, 2), "done"))
        top = _bound(top_op, arg, 3, path)
        if len(arg) > 4:
            raise refuse("Too many terms in numeric range expression", ((*path, 4), "open"))
        if top <= bound:
            raise refuse("Bottom must be less than top", (path, "done"))
        checks.append((_UPPER[top_op], top))
    return lambda v: is_number(v) and all(compare(fixed(v), b) for compare, b in checks)


def _bound(op: str, arg: list[Any], index: int, path: Path) -> int:
    """The number after ``op`` (at ``index`` of ``arg``), as compared."""
    if index >= len(arg) or not is_number(arg[index]):
        name = "equals" if op == "=" else op
        raise refuse(f"Value of {name} must be numeric", _next(path, arg, index))
    return fixed(arg[index])


def _cidr(arg: str) -> Callable[[Value], bool]:
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
