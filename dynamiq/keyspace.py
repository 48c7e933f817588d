"""The message-id keyspace: its bounds, inclusive ranges of it, and the members' slices (pure).

Ids are the integers ``[0, ID_MAX]``. The live members of a cluster, sorted
by name, split them into equal slices; each serves the messages of its own.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["ID_MAX", "KEYSPACE", "WHOLE", "KeyRange", "intersect", "slices"]

KEYSPACE = 1 << 63  # how many ids there are
ID_MAX = KEYSPACE - 1

# An inclusive ``(lo, hi)`` range of ids. A plain tuple: scans take lists of
# them on the hot path.
KeyRange = tuple[int, int]

WHOLE: KeyRange = (0, ID_MAX)


def intersect(a: KeyRange | None, b: KeyRange | None) -> KeyRange | None:
    """Return the ids in both ranges, or None when they share none (or one is None)."""
    if a is None or b is None:
        return None
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo <= hi else None


def slices(names: Iterable[str]) -> dict[str, KeyRange]:
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
