"""Slices: equal, disjoint, covering every id, by sorted name."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from dynamiq.keyspace import KEYSPACE, slices

names = st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=64, unique=True)


@given(members=names)
def test_slices_tile_the_keyspace_in_name_order(members: list[str]) -> None:
    cut = slices(members)
    ordered = [cut[name] for name in sorted(members)]
    assert ordered[0][0] == 0
    assert ordered[-1][1] == KEYSPACE - 1
    for (_, hi), (lo, _) in itertools.pairwise(ordered):
        assert lo == hi + 1  # no gap, no shared boundary
    sizes = {hi - lo + 1 for lo, hi in ordered}
    assert max(sizes) - min(sizes) <= 1


@given(members=names)
def test_the_order_members_are_given_in_does_not_matter(members: list[str]) -> None:
    assert slices(members) == slices(reversed(members))


def test_one_member_serves_everything() -> None:
    assert slices(["solo"]) == {"solo": (0, KEYSPACE - 1)}
