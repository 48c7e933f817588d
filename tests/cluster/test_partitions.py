"""A network partition of a real 3-node cluster: each node in a network namespace of
its own, on one LMDB directory, under steady load with leases longer than the
fence. The node cut off stops leasing, the others take its slice once the fence
has passed, and after the heal nothing is lost and no message was leased twice."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynamiq.client import Client
from dynamiq.cluster.quorum import FENCE_WINDOWS, HEARTBEATS_PER_WINDOW
from dynamiq.config import ClusterSettings
from dynamiq.errors import NoMajority
from dynamiq.testing.cluster import LocalCluster
from dynamiq.testing.netns import Network, available
from tests.cluster.nodes import covered_by, flowing, steady_load
from tests.waiting import until

LEASE_SECONDS = 8.0  # far past the fence: a second lease inside it would be seen


@pytest.fixture
def partitioned(tmp_path: Path) -> Iterator[tuple[LocalCluster, Network]]:
    why = available()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the partition test runs in CI: {why}", pytrace=False)
        pytest.skip(why)
    network = Network(["n1", "n2", "n3"]).up()
    cluster = LocalCluster(tmp_path, 3, network=network)
    try:
        cluster.start()
        yield cluster, network
    finally:
        cluster.stop()
        network.down()


CUT_SECONDS = 3.0


def _no_majority_at(url: str) -> bool:
    with Client(url, rounds=1) as c:
        try:
            c.receive("cut", 1)
        except NoMajority:
            return True
    return False


@pytest.mark.parametrize("fault", ["isolate", "one-way"])
def test_the_side_cut_off_stops_leasing_and_the_majority_takes_over_without_double_leases(
    partitioned: tuple[LocalCluster, Network], fault: str
) -> None:
    cluster, network = partitioned
    with steady_load(cluster, "cut", visibility=LEASE_SECONDS) as load:
        flowing(load, 1200)
        cut_at = time.monotonic()
        (network.isolate if fault == "isolate" else network.one_way)("n3")
        # The node cut off answers receives with 503 NO_MAJORITY,
        until(lambda: _no_majority_at(cluster.nodes["n3"].url), 10.0, 0.1)
        # and the other two serve the whole keyspace, no sooner than the fence.
        until(lambda: covered_by(cluster, ["n1", "n2"]), 15.0, 0.05)
        # The fence: 1.5 windows (cluster.suspecttimeout, 1 s) of silence, counted from
        # n3's last heartbeat, which may have come up to a heartbeat's interval (a
        # quarter window) before the cut.
        window = ClusterSettings().suspecttimeout
        fence = window * (FENCE_WINDOWS - 1 / HEARTBEATS_PER_WINDOW)
        assert time.monotonic() - cut_at >= fence
        # The cut's length, in time: the load's clients wait on the side cut off (its
        # answers lost one way), so acknowledgements need not flow meanwhile.
        time.sleep(CUT_SECONDS)
        network.heal()
        cluster.wait_converged(30)
        flowing(load, 1200)
    report = load.ledger.report()
    assert report.acked > 1000
    assert (report.lost, report.double_leases) == (0, 0), report
