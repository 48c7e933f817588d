"""The cluster the tests of this folder run: node processes on loopback gossiping over UDP.

Every test that takes it runs on both shared stores: one LMDB directory, and a
6-node Redis Cluster (3 primaries, 3 replicas).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynamiq.testing.cluster import LocalCluster
from tests.cluster.nodes import ClusterFactory
from tests.servers import flush_redis


@pytest.fixture(params=["lmdb", "redis-cluster"])
def store_flags(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "lmdb":
        return []  # the launcher's shared directory
    url: str = request.getfixturevalue("redis_cluster_url")
    asyncio.run(flush_redis(url))
    return ["--storage-backend", "redis", "--storage-url", url]


@pytest.fixture
def cluster_factory(tmp_path: Path, store_flags: list[str]) -> Iterator[ClusterFactory]:
    made: list[LocalCluster] = []

    def make(nodes: int = 3, *extra: str, start: bool = True) -> LocalCluster:
        cluster = LocalCluster(
            tmp_path / f"cluster{len(made)}",
            nodes,
            extra=["--core-loglevelstring", "info", *store_flags, *extra],
        )
        made.append(cluster)
        if start:
            cluster.start()
        return cluster

    try:
        yield make
    finally:
        for cluster in made:
            cluster.stop()


@pytest.fixture
def cluster(cluster_factory: ClusterFactory) -> LocalCluster:
    return cluster_factory(3)
