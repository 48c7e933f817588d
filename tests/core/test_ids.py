"""Ids: unique, spread evenly over the keyspace, oldest-first inside a stripe."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from dynamiq.core.ids import STRIPES, IdGenerator, seq_of, stripe_of, stripe_range
from dynamiq.keyspace import ID_MAX


@given(batch=st.integers(1, 1000), seed=st.integers(0, 2**32))
@settings(max_examples=5, deadline=None)
def test_a_million_ids_never_collide(batch: int, seed: int) -> None:
    gen = IdGenerator(rng=random.Random(seed))
    ids = [i for _ in range(1_000_000 // batch + 1) for i in gen.many(batch)][:1_000_000]
    assert len(set(ids)) == len(ids) == 1_000_000
    assert all(0 <= i <= ID_MAX for i in ids[::997])


@given(
    ticks=st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=300),
    seed=st.integers(0, 2**32),
)
@settings(max_examples=200)
def test_ids_are_unique_and_seq_ordered_even_when_the_clock_stalls_or_steps_back(
    ticks: list[int], seed: int
) -> None:
    # Given a clock that stalls, jumps and steps backwards
    now = [1_800_000_000_000_000]
    steps = iter(ticks)

    def clock() -> int:
        now[0] += next(steps, 0) - 2
        return now[0]

    gen = IdGenerator(clock, random.Random(seed))
    # When ids are drawn, one by one and in batches
    ids = [i for t in ticks for i in (gen.many(t) if t % 2 else [gen.next()])]
    # Then they are unique and their seq strictly increases: oldest-first in every stripe
    seqs = [seq_of(i) for i in ids]
    assert len(set(ids)) == len(ids)
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_ids_spread_evenly_over_the_keyspace() -> None:
    gen = IdGenerator(rng=random.Random(7))
    ids = [i for _ in range(128_000) for i in gen.many(2)]
    # Sixteen equal slices of [0, 2^63-1] (a 16-node cluster) each get a fair share.
    per_slice = [0] * 16
    for i in ids:
        per_slice[i * 16 // (ID_MAX + 1)] += 1
    expected = len(ids) / 16
    assert all(abs(n - expected) / expected < 0.05 for n in per_slice), per_slice
    # And every stripe is used, while each batch stays in one stripe.
    assert len({stripe_of(i) for i in ids}) == STRIPES
    assert all(len({stripe_of(i) for i in gen.many(50)}) == 1 for _ in range(10))


def test_stripe_ranges_tile_the_keyspace() -> None:
    assert stripe_range(0)[0] == 0
    assert stripe_range(STRIPES - 1)[1] == ID_MAX
    for s in range(STRIPES - 1):
        assert stripe_range(s)[1] + 1 == stripe_range(s + 1)[0]
