"""Rates over a sliding window, on a fake clock."""

from __future__ import annotations

from dynamiq.core.delivery.rates import RateCounter


def test_rate_is_the_last_whole_seconds_average() -> None:
    rates = RateCounter(window=10)
    for second in range(100, 110):
        rates.add(50, second + 0.5)
    # The current second is not complete: it does not count yet.
    rates.add(1000, 110.2)
    assert rates.rate(110.5) == 50.0
    assert rates.rate(111.0) == (9 * 50 + 1000) / 10
    assert rates.rate(125.0) == 0.0


def test_an_idle_counter_has_no_rate() -> None:
    assert RateCounter().rate(5.0) == 0.0
