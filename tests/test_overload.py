"""A node under more than it should take: it stays responsive, bounded, and answers no 5xx
but the 503s its limits promise (each with Retry-After).

Every node is a real ``dynamiq serve`` process on loopback; the floods are
``bench/overload.py``'s, bounded in count and time. How fast the node
answers meanwhile is reported by that bench; here every probe only has to
be answered, 200, within the probe's own timeout (``PROBE_TIMEOUT``): a node
stuck behind a flood would not answer at all.
"""

from __future__ import annotations

import asyncio
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.overload import (
    MIB,
    Prober,
    address_of,
    probe,
    publish_flood,
    slow_headers,
    waiting_receives,
)
from bench.procs import memory_mib
from dynamiq.client import Client
from dynamiq.errors import DiskLow
from tests.conftest import NodeFactory, NodeProcess
from tests.waiting import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

PEAK_RSS_MIB = 400


@pytest.fixture(autouse=True, scope="module")
def _many_files() -> Iterator[None]:
    """This process opens thousands of sockets too."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _answered_throughout(prober: Prober) -> None:
    assert not prober.failures, prober.failures[0]  # each answered 200, none timed out
    assert len(prober.seconds) >= 5


def _peak_mib(node: NodeProcess) -> float:
    assert node.proc is not None
    return memory_mib(node.proc.pid)


def test_two_thousand_waiting_receives_are_held_while_the_node_answers_others(
    node_factory: NodeFactory,
) -> None:
    node = node_factory().start()
    with Client(node.url) as client:
        client.create_queue("idle")
    with Prober(node.url) as prober:
        statuses = asyncio.run(waiting_receives(node.url, "idle", 2000, 4))
    assert statuses == {200: 2000}
    _answered_throughout(prober)
    assert _peak_mib(node) < PEAK_RSS_MIB


def test_receives_beyond_maxwaiting_get_503_and_later_ones_wait_again(
    node_factory: NodeFactory,
) -> None:
    node = node_factory("--limits-maxwaiting", "50").start()
    with Client(node.url) as client:
        client.create_queue("idle")
    assert asyncio.run(waiting_receives(node.url, "idle", 60, 2)) == {200: 50, 503: 10}
    assert asyncio.run(waiting_receives(node.url, "idle", 50, 1)) == {200: 50}
    with Client(node.url) as client:  # a receive that does not wait is never refused
        assert client.receive("idle", 1, wait_seconds=0) == []


def test_connections_that_send_too_slowly_or_nothing_are_closed_after_the_idle_timeout(
    node_factory: NodeFactory,
) -> None:
    node = node_factory("--limits-idletimeout", "1").start()
    with Prober(node.url) as prober:
        left_open = slow_headers(node.url, slow=300, silent=100, seconds=2.5)
    assert left_open == 0
    _answered_throughout(prober)


def test_connections_beyond_maxconnections_are_answered_503_and_closed(
    node_factory: NodeFactory,
) -> None:
    node = node_factory("--limits-maxconnections", "20").start()
    held = [socket.create_connection(address_of(node.url), timeout=5) for _ in range(20)]
    try:
        time.sleep(0.3)  # the node has taken them
        with socket.create_connection(address_of(node.url), timeout=5) as extra:
            extra.sendall(b"GET /v2/stats HTTP/1.1\r\nHost: localhost\r\n\r\n")
            answer = extra.makefile("rb").read()
        assert answer.startswith(b"HTTP/1.1 503 ")
        assert b"Retry-After: 1" in answer and b"OVERLOADED" in answer
    finally:
        for sock in held:
            sock.close()
    until(lambda: _probed(node.url), 5.0, 0.05, what="the node answers 200 again")


def _exchange(node: NodeProcess, head: bytes, *parts: bytes, pause: float = 0.0) -> bytes:
    """Send a request's head and then ``parts`` ``pause`` s apart; return the status line."""
    with socket.create_connection(address_of(node.url), timeout=10) as sock:
        sock.sendall(head)
        for part in parts:
            sock.sendall(part)
            time.sleep(pause)
        return sock.makefile("rb").readline()


def _publish_head(length: int) -> bytes:
    """A publish's request head declaring a body of ``length`` bytes."""
    return (
        b"POST /v2/queues/q/messages HTTP/1.1\r\nHost: localhost\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % length
    )


def test_a_huge_declared_body_is_refused_before_it_is_read(node_factory: NodeFactory) -> None:
    node = node_factory().start()
    with Client(node.url) as client:
        client.create_queue("q")
    status = _exchange(node, _publish_head(1 << 30) + b"{")
    assert status.split()[1] == b"413"


def test_a_body_slower_than_the_body_timeout_gets_408(node_factory: NodeFactory) -> None:
    node = node_factory("--limits-bodytimeout", "1").start()
    with Client(node.url) as client:
        client.create_queue("q")
    status = _exchange(node, _publish_head(100), *[b'{"m'] * 3, pause=0.5)
    assert status.split()[1] == b"408"
    with Client(node.url) as client:
        assert client.queue("q")["stats"]["depth"] == 0


def test_a_flood_of_large_publishes_waits_its_turn_in_bounded_memory(
    node_factory: NodeFactory,
) -> None:
    # Given a node that holds at most 4 MiB of request bodies at once
    node = node_factory("--limits-maxpendingbytes", str(4 * MIB)).start()
    with Client(node.url) as client:
        client.create_queue("big", max_message_bytes=MIB - 1024)
    # When 8 clients publish 1 MiB messages as fast as they can
    with Prober(node.url) as prober:
        statuses = asyncio.run(publish_flood(node.url, "big", clients=8, seconds=4))
    # Then every publish is taken, in turn, and memory stays bounded
    assert set(statuses) == {200}, statuses
    with Client(node.url) as client:
        assert client.queue("big")["stats"]["depth"] == statuses[200]
    _answered_throughout(prober)
    assert _peak_mib(node) < PEAK_RSS_MIB


def test_below_the_free_disk_limit_publishes_get_503_and_consumers_are_served(
    node_factory: NodeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    node = node_factory(data=data).start()
    with Client(node.url) as client:
        client.create_queue("q")
        client.publish("q", [b"before"])
    node.stop()
    # Given a node whose disk has less free space than its limit (1 PiB)
    node = node_factory("--limits-diskfreelimit", str(1 << 50), data=data).start()
    with Client(node.url, rounds=1) as client:
        # Then publishes are refused, with when to try again
        with pytest.raises(DiskLow, match=r"limits\.diskfreelimit") as refused:
            client.publish("q", [b"after"])
        assert refused.value.retry_after == 5
        # ...and consumers get what is there, and delete it
        got = client.receive("q", 10)
        assert [m.body for m in got] == [b"before"]
        assert client.delete("q", [got[0].id]) == [got[0].id]


def _probed(url: str) -> bool:
    """Whether a probe is answered 200 (the held connections' close seen by the node)."""
    try:
        probe(url)
    except ValueError:  # 503: the node still counts the connections closed
        return False
    return True
