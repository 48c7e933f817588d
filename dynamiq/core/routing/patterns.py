"""Routing-key patterns with the rules of AMQP topic exchanges, matched by a trie (pure).

A routing key is dot-separated words (``orders.eu.created``); no key, or an
empty one, has no words. A pattern is words too, where ``*`` stands for
exactly one word and ``#`` for zero or more. Patterns are compiled once
into a trie shared by every subscription of a topic, so matching a key
costs about one step per word whatever the number of patterns.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

from dynamiq.errors import Invalid
from dynamiq.models import MAX_ROUTING_KEY

__all__ = ["PatternTrie", "check_pattern", "words"]

V = TypeVar("V", bound=Hashable)
ONE, ANY = "*", "#"


def words(key: str | None) -> tuple[str, ...]:
    """Return the words of a routing key or pattern (none for an empty one)."""
    return tuple(key.split(".")) if key else ()


def check_pattern(pattern: object, field: str = "pattern") -> str:
    """Return ``pattern`` if it is one, else raise ``Invalid`` naming ``field``."""
    if not isinstance(pattern, str) or len(pattern) > MAX_ROUTING_KEY:
        raise Invalid(f"{field} must be text of at most {MAX_ROUTING_KEY} characters", field)
    for word in words(pattern):
        if word not in (ONE, ANY) and (ONE in word or ANY in word):
            raise Invalid(
                f"{field}: '*' and '#' stand alone as words ({word!r} mixes them with text)",
                field,
            )
    return pattern


class _Node(Generic[V]):
    __slots__ = ("children", "values")

    def __init__(self) -> None:
        self.children: dict[str, _Node[V]] = {}
        self.values: set[V] = set()


class PatternTrie(Generic[V]):
    """Patterns, each with a value; ``match`` returns the values of those a key fits."""

    def __init__(self, patterns: Iterable[tuple[str, V]] = ()) -> None:
        self._root: _Node[V] = _Node()
        for pattern, value in patterns:
            self.add(pattern, value)

    def add(self, pattern: str, value: V) -> None:
        """Add ``value`` under ``pattern``."""
        node = self._root
        for word in words(pattern):
            node = node.children.setdefault(word, _Node())
        node.values.add(value)

    def match(self, key: str | None) -> set[V]:
        """Return the values of every pattern that ``key`` fits."""
        found: set[V] = set()
        seen: set[tuple[int, int]] = set()  # (node, position): '#' can reach one many ways
        parts = words(key)
        stack = [(self._root, 0)]
        while stack:
            node, i = stack.pop()
            if (id(node), i) in seen:
                continue
            seen.add((id(node), i))
            if i == len(parts):
                found |= node.values
            children = node.children
            if i < len(parts):
                exact = children.get(parts[i])
                if exact is not None:
                    stack.append((exact, i + 1))
                one = children.get(ONE)
                if one is not None:
                    stack.append((one, i + 1))
            rest = children.get(ANY)
            if rest is not None:  # '#' takes any number of the words left
                stack.extend((rest, j) for j in range(i, len(parts) + 1))
        return found
