"""A node on a real redis-server: the engine works through the Redis adapter end to end."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynamiq.client import Client
from tests.conftest import NodeProcess
from tests.servers import redis_server

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
