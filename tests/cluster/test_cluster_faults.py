"""A real cluster (``conftest``) under faults: kill -9, SIGSTOP and a node joining,
under load, losing nothing and leasing nothing twice."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from dynamiq.client import Client
from dynamiq.models import Outgoing
from dynamiq.testing.cluster import LocalCluster
from tests.cluster.nodes import (
    covered_by,
    flowing,
    has_queue,
    kill_9_and_restart,
    pause_and_resume,
    serving,
    steady_load,
    urls,
)
from tests.waiting import until

pytestmark = pytest.mark.timeout(180)

LEASE = 4.0  # seconds: leases that outlive the node that made them, for a while


def test_kill_9_under_load_loses_no_acknowledged_message(cluster: LocalCluster) -> None:
    with steady_load(cluster, "load") as load:
        flowing(load, 1200)
        served = kill_9_and_restart(cluster, load, "n3")
    report = load.ledger.report()
    assert report.acked > 1000
    assert report.lost == 0, report
    assert served  # the dead node's slice was served again while it was down


def test_kill_9_under_load_spread_over_many_queues_loses_nothing(cluster: LocalCluster) -> None:
    tenants = [f"tenant-{i:03}" for i in range(100)]
    with steady_load(cluster, tenants, batch=2) as load:
        flowing(load, 1200)
        kill_9_and_restart(cluster, load, "n1")
    report = load.ledger.report()
    assert report.acked > 1000
    assert (report.lost, report.double_leases) == (0, 0), report
    had = {key[0] for key in load.ledger.acked if isinstance(key, tuple)}
    assert had == set(tenants)  # each queue had some


@pytest.mark.parametrize("fault", ["kill -9", "SIGSTOP"])
def test_a_fault_under_grouped_deduplicated_load_keeps_order_and_stores_once(
    cluster: LocalCluster, fault: str
) -> None:
    shape = {"groups": 20, "dedup": True, "repeat_every": 5}
    with steady_load(cluster, "ordered", **shape) as load:
        flowing(load, 1200)
        if fault == "kill -9":
            kill_9_and_restart(cluster, load, "n2")
        else:
            pause_and_resume(cluster, load, "n2")
    report = load.ledger.report()
    assert report.acked > 1000
    assert (report.lost, report.order_violations, report.stored_twice) == (0, 0, 0), report


def test_sigstop_then_sigcont_under_load(cluster: LocalCluster) -> None:
    with steady_load(cluster, "paused") as load:
        flowing(load, 900)
        pause_and_resume(cluster, load, "n2")
    report = load.ledger.report()
    assert report.acked > 1000 and report.lost == 0, report
    assert "paused" in cluster.nodes["n2"].log_path.read_text()  # it noticed and dropped its leases


def test_a_fourth_node_joins_under_load_without_loss_or_double_lease(
    cluster: LocalCluster,
) -> None:
    # Leases far longer than the test: a message delivered twice would mean two
    # live leases on it at once.
    with steady_load(cluster, "grow", visibility=120) as load:
        flowing(load, 900)
        cluster.add_node()
        cluster.wait_converged(30, expected=["n1", "n2", "n3", "n4"])
        assert covered_by(cluster, ["n1", "n2", "n3", "n4"])
        flowing(load, 900)
    report = load.ledger.report()
    assert report.acked > 1000
    assert (report.lost, report.duplicated) == (0, 0), report


def test_a_dedup_id_holds_across_nodes_and_a_kill_9(cluster: LocalCluster) -> None:
    n1, n2, _ = urls(cluster)
    with Client(n1) as one:
        one.create_queue("once")
        (first,) = one.publish("once", [Outgoing(b"x", dedup_id="order-7")])
    with Client(n2) as two:
        until(lambda: has_queue(two, "once"), 2.0)
        again = two.publish("once", [Outgoing(b"x", dedup_id="order-7")])
        assert list(again) == [first] and again.duplicate == [True]
    cluster.nodes["n1"].signal(signal.SIGKILL)
    cluster.nodes["n1"].wait()
    cluster.start_node("n1")
    cluster.wait_converged(30)
    with Client(n1) as one:  # the claim outlived the process that made it
        assert one.publish("once", [Outgoing(b"x", dedup_id="order-7")]).duplicate == [True]
        assert one.queue("once")["stats"]["depth"] == 1


def _receive_all(
    client: Client, queue: str, count: int, timeout: float, lease: float = 300, most: int = 100
) -> list[Any]:
    """Receive (leases of ``lease`` seconds, ``most`` at a time) through ``client`` until
    ``count`` came."""
    got: list[Any] = []

    def check() -> bool:
        got.extend(client.receive(queue, most, wait_seconds=0.2, visibility_timeout=lease))
        return len(got) >= count

    until(check, timeout)
    return got


def test_receive_counts_survive_kill_9_of_the_node_holding_the_leases(
    cluster: LocalCluster,
) -> None:
    n1, n2, n3 = urls(cluster)
    with Client(n1) as one:
        one.create_queue("plain")  # no max_receives: a delivery writes nothing to the store
        with Client(n2) as two, Client(n3) as three:
            until(lambda: has_queue(two, "plain") and has_queue(three, "plain"), 2.0)
        published = one.publish("plain", [f"m{i}" for i in range(100)])
        leased_at = time.time()
        first = _receive_all(one, "plain", 100, 5.0, lease=LEASE)
    assert sorted(m.id for m in first) == sorted(published)
    assert {m.receive_count for m in first} == {1}
    # The node holding the leases dies; the others take its slice over, and its
    # leases with it: nothing comes back before they end, then all of it, counted.
    victim = cluster.nodes["n1"]
    victim.signal(signal.SIGKILL)
    victim.wait()
    until(lambda: covered_by(cluster, ["n2", "n3"]), 10.0, step=0.05)
    with Client(n2) as two:
        again = _receive_all(two, "plain", 100, 20.0)
    assert time.time() >= leased_at + LEASE
    assert sorted(m.id for m in again) == sorted(published)
    assert {m.receive_count for m in again} == {2}


def test_a_group_published_through_every_node_is_served_in_order_and_resumes_after_kill_9(
    cluster: LocalCluster,
) -> None:
    nodes = urls(cluster)
    with Client(nodes[0]) as one:
        one.create_queue("orders", visibility_timeout=300)
    published: list[int] = []
    for i in range(9):  # one producer, in turn through every node
        with Client(nodes[i % 3]) as client:
            until(lambda: has_queue(client, "orders"), 2.0)
            published += client.publish("orders", [Outgoing(b"%d" % i, group="customer-1")])
    owner = next(n for n in ("n1", "n2", "n3") if _holds(serving(cluster, n), published[0]))
    other = next(url for name, url in zip(("n1", "n2", "n3"), nodes, strict=True) if name != owner)
    with Client(other) as client:  # served by the owner, received through another node
        first = _receive_all(client, "orders", 1, 5.0, most=1)
        assert [m.body for m in first] == [b"0"]
        assert client.receive("orders", 10, wait_seconds=0.5) == []  # the group waits
        client.delete("orders", [first[0].id])
        leased_at = time.time()  # the lease ends no sooner than LEASE from here
        second = _receive_all(client, "orders", 1, 5.0, lease=LEASE, most=1)
        assert [m.body for m in second] == [b"1"]
    # The owner dies while a consumer holds the group's head: the new owner keeps
    # that lease, then serves the head again first, and the rest in order (a
    # receive's worth at a time).
    cluster.nodes[owner].signal(signal.SIGKILL)
    cluster.nodes[owner].wait()
    alive = [n for n in ("n1", "n2", "n3") if n != owner]
    until(lambda: covered_by(cluster, alive), 10.0, step=0.05)
    with Client(other) as client:
        bodies: list[bytes] = []
        while len(bodies) < 8:
            got = _receive_all(client, "orders", 1, 20.0, most=3)
            bodies += [m.body for m in got]
            client.delete("orders", [m.id for m in got])
            assert time.time() >= leased_at + LEASE
    assert bodies == [b"%d" % i for i in range(1, 9)]


def _holds(span: tuple[int, int] | None, message_id: int) -> bool:
    return span is not None and span[0] <= message_id <= span[1]
