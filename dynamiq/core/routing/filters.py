"""Filter policies, as SNS subscriptions have them: one language for SNS and v2 (pure).

A policy is a JSON object whose keys name a message's attributes (scope
``attributes``, SNS's ``MessageAttributes``) or the properties of its JSON
body (scope ``body``, ``MessageBody``), where an object nests keys:
``{"a": {"b": [...]}}`` tests the body's ``a.b``, as ``{"a.b": [...]}`` does.
A message passes when every key passes (AND), a key when one of its match
values matches (OR, ``filter_rules``), and ``{"$or": [{...}, {...}]}`` when
one of its policies does.

What a message holds at a key (``Subject``): an attribute's value (each
element of a ``String.Array`` or ``Number.Array`` one; a binary one is
absent), or every value at that path of the body, through its arrays. A
body that is not a JSON object passes no body policy.

SNS's limits: at most five keys at the top (nested ones not counted), at
most 150 combinations (the product, over the policy's lists, of each list's
length times its depth; a ``$or`` adds up its branches'), 256 KB of JSON.
v2 also takes a bare match value where SNS wants a list (``lenient``). A
policy read back from the store is compiled without the limits
(``limits=False``): it was held to the ones of its day.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Literal

from dynamiq.core.routing.filter_rules import (
    Check,
    Refused,
    Value,
    compile_values,
    is_number,
    refuse,
)
from dynamiq.core.routing.places import Path as PolicyPath
from dynamiq.core.routing.places import located
from dynamiq.models import AttributeValue

__all__ = [
    "FILTER_SCOPES",
    "MAX_FILTER_BYTES",
    "MAX_FILTER_KEYS",
    "FilterPolicy",
    "FilterScope",
    "Subject",
]

FilterScope = Literal["attributes", "body"]
FILTER_SCOPES: tuple[FilterScope, ...] = ("attributes", "body")
MAX_FILTER_KEYS = 5
MAX_COMBINATIONS = 150
MAX_FILTER_BYTES = 256 * 1024
NESTED_ATTRIBUTES = "Filter policy scope MessageAttributes does not support nested filter policy"
_OPERATORS = frozenset(
    {"prefix", "suffix", "equals-ignore-case", "anything-but", "numeric", "exists", "cidr"}
)

Branch = list[tuple[str, Check]]  # keys that must all pass


class Subject:
    """A message as filters look at it: its attributes with their SQS types, and its
    body (read as JSON on the first body policy's look, once)."""

    def __init__(
        self,
        attributes: Mapping[str, AttributeValue] | None = None,
        types: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> None:
        self.attributes = attributes or {}
        self._types = types or {}
        self._body = body
        self._paths: dict[str, list[Value]] | Literal[False] | None = None  # False: no object

    def attribute(self, name: str) -> list[Value]:
        """The values an attribute holds for filtering (none: absent, or binary)."""
        value = self.attributes.get(name)
        if value is None or isinstance(value, bytes):
            return []
        label = self._types.get(name, "")
        if label.endswith(".Array") and isinstance(value, str):
            return _array(value)
        if label.startswith("Number") and isinstance(value, str):
            try:
                return [float(value)]
            except ValueError:
                return []
        return [value]

    def at(self, path: str) -> list[Value]:
        """Every value the body holds at a dotted ``path``."""
        return self._read().get(path, []) if self._paths is not False else []

    def has_object_body(self) -> bool:
        """Whether the body is a JSON object (the only kind body policies pass)."""
        self._read()
        return self._paths is not False

    def _read(self) -> dict[str, list[Value]]:
        """The body's values by path, read once (a body nested deeper than Python's
        stack reads as no JSON object)."""
        if self._paths is None:
            self._paths = False
            try:
                parsed = json.loads(self._body or b"")
                if isinstance(parsed, dict):
                    paths: dict[str, list[Value]] = {}
                    _flatten(parsed, "", paths)
                    self._paths = paths
            except (ValueError, RecursionError):
                pass
        return self._paths or {}


def _array(text: str) -> list[Value]:
    try:
        items = json.loads(text)
    except ValueError:
        return []
    if not isinstance(items, list):
        return []
    return [v for v in items if isinstance(v, str | bool) or v is None or is_number(v)]


def _flatten(node: Any, path: str, into: dict[str, list[Value]]) -> None:
    """Gather the body's scalars by dotted path; an array's items share its path."""
    if isinstance(node, dict):
        for key, value in node.items():
            _flatten(value, f"{path}.{key}" if path else key, into)
    elif isinstance(node, list):
        for item in node:
            _flatten(item, path, into)
    else:
        into.setdefault(path, []).append(node)


class FilterPolicy:
    """A compiled filter policy; ``spec`` is the JSON it came from, ``scope`` what it
    looks at.

    Raises:
        Invalid: the policy is refused (the reason in SNS's words).
    """

    def __init__(
        self,
        spec: object,
        scope: FilterScope = "attributes",
        *,
        lenient: bool = False,
        limits: bool = True,
    ) -> None:
        if not isinstance(spec, dict) or not spec:
            raise refuse("Filter policy must be an object naming at least one key")
        if scope not in FILTER_SCOPES:
            raise refuse('the filter scope is "attributes" or "body"', field="filter_scope")
        self.spec: dict[str, Any] = spec
        self.scope: FilterScope = scope
        self._lenient = lenient
        try:
            if limits:
                _check_limits(spec)
            self._nested = False  # set by a key that nests others
            self._branches = self._compile(spec, (), 1)
            if self._nested and scope == "attributes":  # once read whole, as SNS does
                raise refuse(NESTED_ATTRIBUTES, field="filter_scope")
        except RecursionError:  # nested deeper than anyone filters
            raise refuse("Filter policy is too complex") from None
        except Refused as refused:
            if refused.at is None or lenient:
                raise
            # SNS's shape: where its parser stood, after the reason
            raise refuse(f"{refused}{located(spec, refused.at)}", field=refused.field) from None
        self._anchor = _anchor(spec) if scope == "attributes" else None

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, FilterPolicy)
            and other.spec == self.spec
            and other.scope == self.scope
        )

    def __hash__(self) -> int:
        return hash((json.dumps(self.spec, sort_keys=True), self.scope))

    def anchor(self) -> tuple[str, list[str]] | None:
        """An attribute whose match values are all texts, with those texts: a message
        passes only if it holds one of them there, so a topic can index its policies
        by them. None when no attribute is tested that way."""
        return self._anchor

    def matches(self, subject: Subject) -> bool:
        """Whether the message ``subject`` shows passes."""
        look: Callable[[str], list[Value]]
        if self.scope == "attributes":
            look = subject.attribute
        elif subject.has_object_body():
            look = subject.at
        else:
            return False
        return any(all(check(look(path)) for path, check in branch) for branch in self._branches)

    def _compile(self, node: dict[str, Any], at: PolicyPath, depth: int) -> list[Branch]:
        """The policy as alternatives (one per choice of its ``$or``s), each a list of
        keys that must all pass; ``at`` is where ``node`` is in the policy."""
        branches: list[Branch] = [[]]
        prefix = ".".join(str(step) for step in at if isinstance(step, str) and step != "$or")
        for key, given in node.items():
            here = (*at, key)
            if key == "$or":
                policies = _or_branches(given)
                options = [
                    b for i, p in enumerate(policies) for b in self._compile(p, (*here, i), depth)
                ]
                branches = [b + option for b in branches for option in options]
                continue
            path = f"{prefix}.{key}" if prefix else key
            if self._lenient and self.scope == "attributes" and not isinstance(given, list):
                given = _bare(key, given)
            if isinstance(given, dict):
                self._nested = True
                nested = self._compile(given, here, depth + 1)
                branches = [b + more for b in branches for more in nested]
            elif isinstance(given, list):
                if not given:
                    raise refuse("Empty arrays are not allowed", (here, "done"))
                branches = [[*b, (path, compile_values(given, here))] for b in branches]
            else:
                raise refuse(f'"{key}" must be an object or an array', (here, "open"))
        return branches


def _anchor(spec: dict[str, Any]) -> tuple[str, list[str]] | None:
    if "$or" in spec:
        return None
    for key, given in spec.items():
        listed = given if isinstance(given, list) else [given]
        if all(isinstance(v, str) for v in listed):
            return key, listed
    return None


def _or_branches(given: object) -> list[dict[str, Any]]:
    if not isinstance(given, list) or not given or not all(isinstance(p, dict) for p in given):
        raise refuse('"$or" must be an array of objects')
    return given


def _is_expression(given: object) -> bool:
    """Whether ``given`` is one match expression (``{"prefix": ...}``) rather than keys."""
    return isinstance(given, dict) and len(given) == 1 and next(iter(given)) in _OPERATORS


def _bare(key: str, given: object) -> object:
    """A v2 key's bare match value as a list of one (a bare object is one match
    expression when its key is an operator)."""
    if isinstance(given, dict):
        return [given] if _is_expression(given) else given
    if isinstance(given, str) or is_number(given):
        return [given]
    raise refuse(f'"{key}" must be an object or an array')


def _check_limits(spec: dict[str, Any]) -> None:
    if len(spec) > MAX_FILTER_KEYS:
        raise refuse(f"Filter policy can not have more than {MAX_FILTER_KEYS} keys")
    if len(json.dumps(spec).encode()) > MAX_FILTER_BYTES:
        raise refuse(f"Filter policy is larger than {MAX_FILTER_BYTES} bytes")
    if _combinations(spec, 1) > MAX_COMBINATIONS:
        raise refuse("Filter policy is too complex")


def _combinations(node: dict[str, Any], depth: int) -> int:
    total = 1
    for key, given in node.items():
        if key == "$or" and isinstance(given, list):
            total *= sum(_combinations(p, depth) for p in given if isinstance(p, dict))
        elif isinstance(given, dict) and not _is_expression(given):
            total *= _combinations(given, depth + 1)
        elif isinstance(given, list):
            total *= len(given) * depth
        else:
            total *= depth
    return total
