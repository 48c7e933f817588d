"""Requests in batches no larger than a node accepts."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import TypeVar

__all__ = ["MAX_BATCH", "batches"]

T = TypeVar("T")

# Most ids or messages one request carries (a node's default ``limits.maxbatch``).
MAX_BATCH = 1000


def batches(items: Iterable[T], size: int = MAX_BATCH) -> Iterator[list[T]]:
    """Yield ``items`` in lists of ``size`` (the last may be shorter)."""
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk
