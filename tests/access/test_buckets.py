"""Token buckets, on given times."""

from __future__ import annotations

import pytest

from dynamiq.access.buckets import Buckets


def test_a_bucket_gives_its_burst_then_its_rate() -> None:
    buckets = Buckets(per_second=2.0, burst=3)
    assert [buckets.take("a", 0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a", 0.0) == pytest.approx(0.5)
    assert buckets.waiting("a", 0.25) == pytest.approx(0.25)
    assert buckets.take("a", 0.5) == 0.0
    assert buckets.take("b", 0.5) == 0.0  # each key has its own
    assert buckets.waiting("a", 10.0) == 0.0 and buckets.level("a", 10.0) == 3


def test_full_buckets_are_forgotten_when_there_are_too_many() -> None:
    buckets = Buckets(per_second=1.0, burst=2, max_keys=10)
    for key in range(10):
        buckets.take(key, 0.0)
    buckets.take("busy", 5.0)
    buckets.take("busy", 5.0)
    assert buckets.waiting("busy", 5.0) == pytest.approx(1.0)  # kept: it is being limited
    assert len(buckets._tokens) <= 9
