"""The partition cursor: oldest-first, across receives, publishes and ending leases."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from dynamiq.core.delivery.cursor import PartitionCursor
from dynamiq.core.delivery.partitions import Partition, layout
from dynamiq.core.ids import STRIPES, IdGenerator, seq_of
from dynamiq.keyspace import ID_MAX


class Cursor:
    """Drive a PartitionCursor against an in-memory sorted key set."""

    def __init__(self, part: Partition, keys: set[int]) -> None:
        self.keys = keys
        self.cursor = PartitionCursor(part, 0.0)

    def take(
        self, want: int, skip: set[int], while_out: Callable[[], object] = lambda: None
    ) -> list[int]:
        """Take ``want`` ids; ``while_out`` runs once, between the first round's
        scans reading the keys and their results reaching the cursor."""
        self.cursor.take(want, skip)
        rounds = 0
        while wanted := self.cursor.requests():
            rounds += 1
            assert rounds < 1000
            ordered = sorted(self.keys)
            found = [[k for k in ordered if lo <= k <= hi][:limit] for _, lo, hi, limit in wanted]
            if rounds == 1:
                while_out()
            for (lane, *_), keys in zip(wanted, found, strict=True):
                self.cursor.feed(lane, keys)
        return self.cursor.result


@given(
    script=st.lists(
        st.tuples(
            st.sampled_from(["publish", "take", "take_racing", "expire", "delete"]),
            st.integers(1, 60),
        ),
        max_size=30,
    ),
    seed=st.integers(0, 2**32),
)
@settings(max_examples=150, deadline=None)
def test_cursor_hands_out_the_oldest_visible_messages_first(
    script: list[tuple[str, int]], seed: int
) -> None:
    # Given a partition, messages published over time and a lease table
    rng = random.Random(seed)
    gen = IdGenerator(rng=rng)
    part = layout(0, ID_MAX, 4)[rng.randrange(4)]
    stored: set[int] = set()
    leased: set[int] = set()
    walk = Cursor(part, stored)

    def publish(n: int) -> None:
        # One batch (one stripe), or single messages in random stripes
        drawn = gen.many(n * 4) if n % 2 else [gen.next() for _ in range(n * 4)]
        fresh = [i for i in drawn if i in part]
        stored.update(fresh)
        walk.cursor.touch(sorted(fresh))

    for op, n in script:
        if op == "publish":
            publish(n)
        elif op in ("take", "take_racing"):
            # When a receive takes from the cursor (while a publish lands
            # between its scans reading the store and their results arriving)
            racing = functools.partial(publish, n if op == "take_racing" else 0)
            got = walk.take(n, leased, racing)
            # Then it gets exactly the oldest visible ones, oldest first
            visible = sorted((i for i in stored if i not in leased), key=seq_of)
            assert got == visible[:n]
            leased.update(got)
        elif op == "expire":
            ended = rng.sample(sorted(leased), min(n, len(leased)))
            leased.difference_update(ended)
            walk.cursor.offer_again(ended)
        else:
            gone = rng.sample(sorted(leased), min(n, len(leased)))
            leased.difference_update(gone)
            stored.difference_update(gone)


def test_cursor_over_every_stripe_of_the_whole_keyspace() -> None:
    ids = IdGenerator(rng=random.Random(3)).many(5000)
    (part,) = layout(0, ID_MAX, 1)
    assert len(part.ranges) == STRIPES
    walk = Cursor(part, set(ids))
    assert walk.take(100, set()) == ids[:100]
    assert walk.take(100, set()) == ids[100:200]
