"""A store primary fails under a real 3-node cluster: a 6-node Redis Cluster of its
own, writes waiting for one replica. Its replica is promoted, the old primary
comes back as a replica, and the nodes serve again by themselves: nothing
acknowledged is lost and no message is leased twice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dynamiq.client import Client
from dynamiq.errors import DynamiqError
from dynamiq.testing.cluster import LocalCluster
from tests.cluster.nodes import flowing, steady_load
from tests.servers import RedisCluster, redis_cluster
from tests.waiting import until

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def on_redis(tmp_path: Path) -> Iterator[tuple[LocalCluster, RedisCluster]]:
    with redis_cluster(tmp_path / "redis") as redis:
        flags = ["--storage-backend", "redis", "--storage-url", redis.url]
        cluster = LocalCluster(tmp_path, 3, extra=[*flags, "--storage-waitreplicas", "1"])
        try:
            cluster.start()
            yield cluster, redis
        finally:
            cluster.stop()


def _serves(urls: list[str]) -> bool:
    """Whether a publish and a receive through every node succeed (a shard of each
    stripe the publish drew: several publishes reach every primary)."""
    for url in urls:
        with Client(url, rounds=1, timeout=3.0) as c:
            try:
                for _ in range(5):
                    c.publish("probe", ["p"])
                c.receive("probe", 10, visibility_timeout=600)
            except DynamiqError:
                return False
    return True


@pytest.mark.parametrize("fault", ["kill -9", "SIGSTOP"])
def test_a_store_primary_failing_under_load_loses_nothing_and_the_nodes_serve_again(
    on_redis: tuple[LocalCluster, RedisCluster], fault: str
) -> None:
    cluster, redis = on_redis
    urls = [n.url for n in cluster.nodes.values()]
    with Client(urls) as c:
        c.create_queue("probe")
    with steady_load(cluster, "load") as load:
        flowing(load, 1200)
        # Its replica is promoted; the old primary comes back and follows it.
        victim, _ = redis.fail_primary(fault)
        assert redis.role(victim) == "slave"
        # The nodes serve again by themselves.
        until(lambda: _serves(urls), 30.0, 0.2)
        flowing(load, 1200)
    report = load.ledger.report()
    assert report.acked > 1000
    assert (report.lost, report.double_leases) == (0, 0), report
