"""Draw again where a key is taken: the bounded retry of every write under a fresh key.

A message is stored, moved or hinted under a key drawn for it; another
process may hold that key already (the store never overwrites), and then a
new key is drawn. Every such write goes through ``placed``, so the bound and
its meaning are the same everywhere.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["ATTEMPTS", "placed"]

ATTEMPTS = 5  # tries before a write under fresh keys gives up on what is left

T = TypeVar("T")


async def placed(todo: list[T], attempt: Callable[[list[T], int], Awaitable[list[T]]]) -> list[T]:
    """Write ``todo`` with ``attempt(items, n)``, which returns the items whose key was
    taken, then write those again (``n`` counts the tries from 0), at most
    ``ATTEMPTS`` times; return what is still not written (empty: all of it)."""
    for n in range(ATTEMPTS):
        if not todo:
            break
        todo = await attempt(todo, n)
    return todo
