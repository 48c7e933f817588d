"""A node on a real redis-server: the engine works through the Redis adapter end to end."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynamiq.client import Client
from tests.conftest import NodeProcess
from tests.servers import free_port, redis_server

pytestmark = pytest.mark.slow


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with redis_server(tmp_path / "redis") as url:
        yield url


def test_a_node_on_redis_keeps_acknowledged_messages_across_kill_9(
    node_factory: type[NodeProcess], redis_url: str
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
    node_factory: type[NodeProcess], tmp_path: Path
) -> None:
    port = free_port()
    with redis_server(tmp_path / "redis", port) as url:
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
