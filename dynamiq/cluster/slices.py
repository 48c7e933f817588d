"""Slices of the id keyspace: the live members, sorted by name, split it evenly (pure)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["KEYSPACE", "slices"]

KEYSPACE = 1 << 63  # ids are 0 .. 2^63-1


def slices(names: Iterable[str]) -> dict[str, tuple[int, int]]:
    """Return each member's slice ``(lo, hi)``, inclusive.

    Slices are disjoint, cover every id, and their sizes differ by at most
    one id (the original shared boundaries between neighbours and left the
    top ids unserved).
    """
    members = sorted(set(names))
    count = len(members)
    return {
        name: (KEYSPACE * i // count, KEYSPACE * (i + 1) // count - 1)
        for i, name in enumerate(members)
    }
