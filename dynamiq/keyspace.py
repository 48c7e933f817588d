"""The message-id keyspace: its bounds, inclusive ranges of it, and the members' slices (pure).

Ids are the integers ``[0, ID_MAX]``. The live members of a cluster, sorted
by name, split them into equal slices; each serves the messages of its own.
A node served by several worker processes is several members, named
``node/0``, ``node/1``...: sorted, they are neighbours, so the node's share
is one range, split between its workers.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "ID_MAX",
    "KEYSPACE",
    "WHOLE",
    "WORKER_MARK",
    "KeyRange",
    "intersect",
    "node_of",
    "slices",
    "worker_name",
]

KEYSPACE = 1 << 63  # how many ids there are
ID_MAX = KEYSPACE - 1

# An inclusive ``(lo, hi)`` range of ids. A plain tuple: scans take lists of
# them on the hot path.
KeyRange = tuple[int, int]

WHOLE: KeyRange = (0, ID_MAX)

# Between a node's name and a worker's number in its workers' member names.
WORKER_MARK = "/"


def worker_name(node: str, index: int) -> str:
    """Return the member name of a node's worker ``index``."""
    return f"{node}{WORKER_MARK}{index}"


def node_of(member: str) -> str:
    """Return the node a member belongs to: itself, or the node it is a worker of."""
    return member.partition(WORKER_MARK)[0]


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
