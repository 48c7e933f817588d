"""A node on a real redis-server: the engine works through the Redis adapter end to end."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynamiq.client import Client
from dynamiq.errors import BackendUnavailable
from tests.conftest import NodeFactory
from tests.servers import redis_cluster, redis_server

pytestmark = pytest.mark.slow


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with redis_server(tmp_path / "redis") as url:
        yield url


def test_a_node_on_redis_keeps_acknowledged_messages_across_kill_9(
    node_factory: NodeFactory, redis_url: str
) -> None:
    flags = ("--storage-backend", "redis", "--storage-url", redis_url)
    node = node_factory(*flags).start()
    with Client(node.url) as client:
        client.create_queue("r", visibility_timeout=300)
        published = client.publish("r", [f"m{i}" for i in range(500)])
        first = client.receive("r", 100)
        assert [m.id for m in first] == published[:100]  # oldest first, through Redis too
        assert client.delete("r", [m.id for m in first]) == [m.id for m in first]
    node.signal(signal.SIGKILL)
    node.wait()
    node = node_factory(*flags).start()
    with Client(node.url) as client:
        delivered = []
        while got := client.receive("r", 100):
            delivered += [m.id for m in got]
        assert sorted(delivered) == sorted(published[100:])
        assert client.queue("r")["stats"]["depth"] == 400


def test_an_unreachable_store_is_503_and_the_node_recovers(
    node_factory: NodeFactory, tmp_path: Path
) -> None:
    with redis_server(tmp_path / "redis") as url:
        node = node_factory("--storage-backend", "redis", "--storage-url", url).start()
        with Client(node.url) as client:
            client.create_queue("f")
            kept = client.publish("f", ["before"])
    # The server is gone: requests fail with 503 and Retry-After, the node stays up
    for _ in range(3):
        response = _post(node.url + "/v2/queues/f/messages", b'{"messages":[{"body":"x"}]}')
        assert response[0] == 503 and response[1].get("Retry-After", "").isdigit()
    assert node.proc is not None and node.proc.poll() is None
    # It comes back on the same port and data: the node serves again by itself
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with redis_server(tmp_path / "redis", port), Client(node.url) as client:
        assert [m.id for m in client.receive("f", 5)] == kept
        assert len(client.publish("f", ["after"])) == 1


def _post(url: str, body: bytes) -> tuple[int, dict[str, str]]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers)


def test_killing_a_cluster_primary_under_load_loses_no_acknowledged_message(
    node_factory: NodeFactory, tmp_path: Path
) -> None:
    # Given a node on a 6-node Redis Cluster that waits for one replica per write
    with redis_cluster(tmp_path / "cluster") as cluster:
        node = node_factory(
            "--storage-backend",
            "redis",
            "--storage-url",
            cluster.url,
            "--storage-waitreplicas",
            "1",
        ).start()
        acked: list[int] = []
        with Client(node.url, timeout=20) as client:
            client.create_queue("ha", visibility_timeout=600)
            # When publishes run and a primary is killed on the way
            victim = next(p for p in cluster.ports if cluster.role(p) == "master")
            deadline = time.monotonic() + 12
            batch = 0
            while time.monotonic() < deadline:
                if batch == 20:
                    cluster.kill(victim)
                try:
                    acked += client.publish("ha", [f"b{batch}-{i}" for i in range(50)])
                except BackendUnavailable:
                    # Not acknowledged (after the client's own retries): may be retried.
                    time.sleep(0.2)
                batch += 1
            # Then every acknowledged message is still there, once the cluster healed
            delivered: set[int] = set()
            while time.monotonic() < deadline + 30:
                try:
                    got = client.receive("ha", 500)
                except BackendUnavailable:
                    time.sleep(0.2)
                    continue
                if not got:
                    break
                delivered.update(m.id for m in got)
        # The kill happened under load and a replica took over (the client's own
        # failover may have hidden every refusal, so refusals are not required).
        assert batch > 20 and len(acked) >= 20 * 50
        live = [p for p in cluster.ports if p != victim]
        assert cluster.role(victim) == "down"
        assert sum(cluster.role(p) == "master" for p in live) == 3
        lost = set(acked) - delivered
        assert not lost, f"{len(lost)} of {len(acked)} acknowledged messages lost"
