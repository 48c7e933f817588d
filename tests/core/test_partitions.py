"""Partitions: layout, least-recently-used choice, growth and retirement."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from dynamiq.core.clock import FakeClock
from dynamiq.core.delivery.partitions import EMPTY_HINT_SECONDS, PartitionSet, layout
from dynamiq.core.ids import stripe_of
from dynamiq.keyspace import ID_MAX
from dynamiq.models import QueueSettings


@given(lo=st.integers(0, ID_MAX), span=st.integers(0, ID_MAX), count=st.integers(1, 300))
def test_layout_covers_the_slice_exactly_with_whole_stripes(lo: int, span: int, count: int) -> None:
    hi = min(ID_MAX, lo + span)
    parts = layout(lo, hi, count)
    assert parts[0].lo == lo and parts[-1].hi == hi
    assert len(parts) == min(count, stripe_of(hi) - stripe_of(lo) + 1)
    for a, b in itertools.pairwise(parts):
        assert a.hi + 1 == b.lo
    for p in parts:
        assert p.ranges[0][0] == p.lo and p.ranges[-1][1] == p.hi
        for r_lo, r_hi in p.ranges:
            assert stripe_of(r_lo) == stripe_of(r_hi)


def _settings(**kw: float) -> QueueSettings:
    return QueueSettings(**kw)  # type: ignore[arg-type]


def test_receives_take_the_least_recently_used_partition(fake_clock: FakeClock) -> None:
    parts = PartitionSet(0, ID_MAX, _settings(min_partitions=3, max_partitions=3), fake_clock.now())
    order = []
    for _ in range(6):
        p = parts.acquire(fake_clock.now())
        assert p is not None
        order.append(p.index)
        fake_clock.advance(1)
        parts.release(p, fake_clock.now(), found=True)
    assert order[:3] == sorted(order[:3]) or len(set(order[:3])) == 3
    assert order[3:] == order[:3]


def test_an_empty_partition_is_skipped_until_woken_or_its_hint_expires(
    fake_clock: FakeClock,
) -> None:
    parts = PartitionSet(0, ID_MAX, _settings(min_partitions=2, max_partitions=2), fake_clock.now())
    a = parts.acquire(fake_clock.now())
    assert a is not None
    parts.release(a, fake_clock.now(), found=False)
    b = parts.acquire(fake_clock.now())
    assert b is not None and b.index != a.index
    parts.release(b, fake_clock.now(), found=False)
    assert parts.acquire(fake_clock.now()) is None
    # A publish into partition a wakes it.
    parts.wake([a.lo])
    again = parts.acquire(fake_clock.now())
    assert again is not None and again.index == a.index
    parts.release(again, fake_clock.now(), found=False)
    fake_clock.advance(EMPTY_HINT_SECONDS)
    assert parts.acquire(fake_clock.now()) is not None


def test_a_partition_woken_while_a_receive_looks_is_not_hinted_empty_after(
    fake_clock: FakeClock,
) -> None:
    parts = PartitionSet(0, ID_MAX, _settings(min_partitions=1, max_partitions=1), fake_clock.now())
    part = parts.acquire(fake_clock.now())
    assert part is not None
    # A receive looks; meanwhile a message is published (or offered again) there
    parts.wake([part.lo])
    # Its "found nothing" is stale: the next receive looks at once
    parts.release(part, fake_clock.now(), found=False)
    again = parts.acquire(fake_clock.now())
    assert again is not None and again.index == part.index
    parts.release(again, fake_clock.now(), found=False)
    assert parts.acquire(fake_clock.now()) is None  # the next "found nothing" holds


def test_the_next_hint_end_is_when_a_skipped_partition_is_worth_a_look(
    fake_clock: FakeClock,
) -> None:
    # A receive that skips every hinted partition must still wake when the first
    # hint ends: a delayed message comes due in that partition then.
    parts = PartitionSet(0, ID_MAX, _settings(min_partitions=2, max_partitions=2), fake_clock.now())
    assert parts.next_hint_end(fake_clock.now()) is None
    now = fake_clock.now()
    a, b = parts.acquire(now), parts.acquire(now)
    assert a is not None and b is not None
    parts.release(a, now, found=False, due_at=now + 0.2)  # its next message is due then
    parts.release(b, now, found=False)  # nothing in it: the usual hint
    assert parts.next_hint_end(now) == now + 0.2
    fake_clock.advance(0.2)
    assert parts.next_hint_end(fake_clock.now()) == now + EMPTY_HINT_SECONDS
    fake_clock.advance(EMPTY_HINT_SECONDS)
    assert parts.next_hint_end(fake_clock.now()) is None


def _grow(parts: PartitionSet, count: int, now: float) -> None:
    """Grow ``parts`` to ``count`` partitions, as concurrent receives do."""
    while len(parts.partitions) < count:
        size = len(parts.partitions)
        held = [parts.acquire(now) for _ in range(size)]
        # Every partition busy: the layout grows by one, but none of the new
        # partitions is walked while one of the old layout (same stripes) is out
        assert parts.acquire(now) is None and len(parts.partitions) == size + 1
        for part in held:
            assert part is not None
            parts.release(part, now, found=True)


def test_a_partition_opens_when_all_are_busy_up_to_the_maximum(fake_clock: FakeClock) -> None:
    parts = PartitionSet(0, ID_MAX, _settings(min_partitions=1, max_partitions=3), fake_clock.now())
    now = fake_clock.now()
    _grow(parts, 3, now)
    held = [parts.acquire(now) for _ in range(4)]
    assert sorted(p.index for p in held if p) == [0, 1, 2] and held[3] is None
    assert len(parts.partitions) == 3


def test_idle_partitions_retire_down_to_the_minimum(fake_clock: FakeClock) -> None:
    s = _settings(min_partitions=1, max_partitions=4, max_partition_age=60)
    parts = PartitionSet(0, ID_MAX, s, fake_clock.now())
    _grow(parts, 3, fake_clock.now())
    assert len(parts.partitions) == 3
    # One partition keeps serving; the other two go idle.
    fake_clock.advance(59)
    p = parts.acquire(fake_clock.now())
    assert p is not None and len(parts.partitions) == 3
    parts.release(p, fake_clock.now(), found=True)
    fake_clock.advance(41)
    p = parts.acquire(fake_clock.now())
    assert p is not None and len(parts.partitions) == 1


def test_new_settings_clamp_the_partition_count(fake_clock: FakeClock) -> None:
    parts = PartitionSet(0, ID_MAX, _settings(min_partitions=1, max_partitions=5), fake_clock.now())
    parts.configure(_settings(min_partitions=4, max_partitions=5), fake_clock.now())
    assert len(parts.partitions) == 4
    parts.configure(_settings(min_partitions=1, max_partitions=2), fake_clock.now())
    assert len(parts.partitions) == 2
