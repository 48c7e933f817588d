"""Every queue's publishes, receives and deletes over a sliding window, on a fake clock."""

from __future__ import annotations

from dynamiq.core.delivery.rates import Activity, Event


def test_rates_are_the_last_whole_seconds_average() -> None:
    activity = Activity(window=10)
    for second in range(100, 110):
        activity.add(Event.PUBLISHED, "q", 50, second + 0.5)
        activity.add(Event.DELETED, "q", 5, second + 0.5)
    # The current second is not complete: it does not count yet.
    activity.add(Event.PUBLISHED, "q", 1000, 110.2)
    assert activity.rates("q", 110.5) == (50.0, 0.0, 5.0)
    assert activity.rates("q", 111.0) == ((9 * 50 + 1000) / 10, 0.0, 4.5)
    assert activity.rates("q", 125.0) == (0.0, 0.0, 0.0)


def test_queues_are_counted_apart_and_a_fan_out_in_one_call() -> None:
    activity = Activity(window=10)
    activity.add_each(Event.PUBLISHED, [("a", 1), ("b", 1), ("c", 2)], 100.0)
    activity.add(Event.RECEIVED, "a", 3, 100.5)
    activity.add(Event.DELETED, "a", 0, 100.5)  # nothing counted: nothing kept
    assert activity.rates("a", 101.0) == (0.1, 0.3, 0.0)
    assert activity.rates("b", 101.0) == (0.1, 0.0, 0.0)
    # This second's so far count in how busy a queue is; the window's end drops all
    assert activity.recent(101.0) == {"a": 4, "b": 1, "c": 2}
    activity.add(Event.PUBLISHED, "b", 7, 101.2)
    assert activity.recent(101.5) == {"a": 4, "b": 8, "c": 2}
    assert activity.recent(111.0) == {"b": 7}
    assert activity.recent(112.0) == {} == activity.recent(200.0)


def test_an_idle_queue_has_no_rates() -> None:
    assert Activity().rates("q", 5.0) == (0.0, 0.0, 0.0)
