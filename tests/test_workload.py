"""The total-queue check that the chaos command and the cluster tests rely on:
it must see a loss, a group out of order and a dedup id stored twice."""

from __future__ import annotations

from dynamiq.testing.workload import Ledger


def test_a_group_may_see_its_messages_in_flight_again_but_never_an_earlier_one() -> None:
    ledger = Ledger()
    with ledger.lock:
        deliveries = [("a", 0, 1), ("b", 1, 1), ("a", 2, 2), ("a", 2, 3), ("b", 3, 3)]
        deliveries += [("a", 4, 4), ("a", 6, 4), ("a", 4, 5), ("a", 6, 5), ("a", 8, 5)]
        for group, n, receive in deliveries:  # 4 and 6 came together, then again
            ledger.delivered_in_group(group, group, n, receive=receive)
    report = ledger.report()
    assert report.order_violations == 0 and report.several_of_a_group == 2
    with ledger.lock:
        ledger.delivered_in_group("a", "a", 2, receive=6)  # 4 came already: 2 was deleted
        ledger.delivered_in_group("c", "b", 5, receive=6)  # delivered as part of another group
        ledger.delivered_in_group("b", "b", 7, receive=7)
        ledger.delivered_in_group("b", "b", 5, receive=7)  # out of order within a receive
    report = ledger.report()
    assert report.order_violations == 3 and report.failed


def test_a_body_found_under_two_ids_was_stored_twice() -> None:
    ledger = Ledger()
    ledger.acked.update({1, 2, 3})
    ledger.delivered.update([1, 2, 3, 3])
    ledger.stored_as["p0-0"].update({1})
    ledger.stored_as["p0-1"].update({2})  # its repeat answered the same id
    report = ledger.report()
    assert (report.stored_twice, report.duplicated, report.failed) == (0, 1, False)
    ledger.stored_as["p0-1"].add(3)
    report = ledger.report()
    assert (report.stored_twice, report.failed) == (1, True)


def test_an_acknowledged_id_never_delivered_is_lost() -> None:
    ledger = Ledger()
    ledger.acked.update({1, 2})
    ledger.delivered.update([1])
    report = ledger.report()
    assert (report.lost, report.failed) == (1, True)


def test_a_delivery_before_an_earlier_lease_could_end_is_a_double_lease() -> None:
    ledger = Ledger()
    with ledger.lock:
        ledger.leased([1, 2], asked=10.0, answered=10.1, seconds=5.0, by="n1")
        ledger.leased([1], asked=15.0, answered=15.2, seconds=5.0)  # after 10.0 + 5: a lapse
        ledger.leased([2], asked=14.0, answered=14.9, seconds=5.0, by="n2")  # 10.0 + 5 not yet
        ledger.leased([2], asked=19.0, answered=19.95, seconds=5.0)  # 14.0 + 5 passed
    report = ledger.report()
    assert report.double_leases == 1 and report.failed
    # The example names both receives: when each was sent and answered, and through which node.
    (example,) = ledger.examples
    assert example.endswith(
        "id 2: leased again 0.10 s early (asked 14.00, answered 14.90 through n2); "
        "before (asked 10.00, answered 10.10 through n1)"
    )
