"""A node under more than it should take: it stays responsive, bounded, and answers no 5xx
but the 503s its limits promise (each with Retry-After).

Every node is a real ``dynamiq serve`` process on loopback; every flood is
bounded in count and time. How fast the node answers meanwhile is reported
by ``bench/overload.py``; here a probe only has to be answered at all, in
far less time than a stuck node would take.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from dynamiq.client import Client
from dynamiq.errors import DiskLow
from tests.conftest import NodeFactory, NodeProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

PROBE_SECONDS = 2.0  # a node stuck behind a flood does not answer a probe in this time
MIB = 1 << 20


@pytest.fixture(autouse=True, scope="module")
def _many_files() -> Iterator[None]:
    """This process opens thousands of sockets too."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _address(node: NodeProcess) -> tuple[str, int]:
    parts = urlsplit(node.url)
    return parts.hostname or "", parts.port or 80


def _rss_mib(node: NodeProcess, field: str = "VmHWM") -> float:
    """The node's peak (``VmHWM``) or current (``VmRSS``) resident memory."""
    assert node.proc is not None
    for line in Path(f"/proc/{node.proc.pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field}")


def _probe(node: NodeProcess) -> float:
    """Seconds a ``GET /v2/stats`` on a new connection took; it must be answered 200."""
    started = time.monotonic()
    with socket.create_connection(_address(node), timeout=PROBE_SECONDS) as sock:
        sock.sendall(b"GET /v2/stats HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        status = sock.makefile("rb").readline()
    assert status.split()[1] == b"200", status
    return time.monotonic() - started


class Prober:
    """Probes the node every 100 ms in a thread while a flood lasts."""

    def __init__(self, node: NodeProcess) -> None:
        self.node = node
        self.seconds: list[float] = []
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        assert not self.failures, self.failures[0]
        assert self.seconds, "no probe was made"
        assert max(self.seconds) < PROBE_SECONDS

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self.seconds.append(_probe(self.node))
            except (OSError, AssertionError) as exc:
                self.failures.append(exc)


async def _statuses(session: aiohttp.ClientSession, method: str, url: str, **kw: object) -> int:
    async with session.request(method, url, **kw) as response:  # type: ignore[arg-type]
        await response.read()
        if response.status == 503:
            assert response.headers["Retry-After"].isdigit()
        return response.status


def test_two_thousand_waiting_receives_are_held_while_the_node_answers_others(
    node_factory: NodeFactory,
) -> None:
    node = node_factory().start()
    with Client(node.url) as client:
        client.create_queue("idle")
    url = f"{node.url}/v2/queues/idle/receive"

    async def flood() -> Counter[int]:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            body = {"max_messages": 1, "wait_seconds": 4}
            waits = [_statuses(session, "POST", url, json=body) for _ in range(2000)]
            return Counter(await asyncio.gather(*waits))

    with Prober(node) as prober:
        statuses = asyncio.run(flood())
    assert statuses == {200: 2000}
    assert len(prober.seconds) >= 10
    assert _rss_mib(node) < 400


def test_receives_beyond_maxwaiting_get_503_and_later_ones_wait_again(
    node_factory: NodeFactory,
) -> None:
    node = node_factory("--limits-maxwaiting", "50").start()
    with Client(node.url) as client:
        client.create_queue("idle")
    url = f"{node.url}/v2/queues/idle/receive"

    async def waits(count: int) -> Counter[int]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            body = {"max_messages": 1, "wait_seconds": 2}
            return Counter(
                await asyncio.gather(
                    *(_statuses(session, "POST", url, json=body) for _ in range(count))
                )
            )

    assert asyncio.run(waits(60)) == {200: 50, 503: 10}
    assert asyncio.run(waits(50)) == {200: 50}
    with Client(node.url) as client:  # a receive that does not wait is never refused
        assert client.receive("idle", 1, wait_seconds=0) == []


def test_connections_that_send_too_slowly_or_nothing_are_closed_after_the_idle_timeout(
    node_factory: NodeFactory,
) -> None:
    node = node_factory("--limits-idletimeout", "1").start()
    address = _address(node)
    # Given 300 connections that send a request's headers a few bytes at a time,
    # and 100 that send nothing
    slow = [socket.create_connection(address, timeout=10) for _ in range(300)]
    silent = [socket.create_connection(address, timeout=10) for _ in range(100)]
    header = b"GET /v2/stats HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 200
    closed: set[int] = set()
    try:
        with Prober(node):
            for offset in range(0, len(header), 4):
                for i, sock in enumerate(slow):
                    if i not in closed:
                        try:
                            sock.sendall(header[offset : offset + 4])
                        except OSError:
                            closed.add(i)
                time.sleep(0.05)  # 50 rounds: 2.5 s, longer than the idle timeout
        # Then the node has closed every one of them
        for sock in slow + silent:
            sock.settimeout(5)
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(1024) == b""
    finally:
        for sock in slow + silent:
            sock.close()


def test_connections_beyond_maxconnections_are_answered_503_and_closed(
    node_factory: NodeFactory,
) -> None:
    node = node_factory("--limits-maxconnections", "20").start()
    held = [socket.create_connection(_address(node), timeout=5) for _ in range(20)]
    try:
        time.sleep(0.3)  # the node has taken them
        with socket.create_connection(_address(node), timeout=5) as extra:
            extra.sendall(b"GET /v2/stats HTTP/1.1\r\nHost: localhost\r\n\r\n")
            answer = extra.makefile("rb").read()
        assert answer.startswith(b"HTTP/1.1 503 ")
        assert b"Retry-After: 1" in answer and b"OVERLOADED" in answer
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    assert _probe(node) < PROBE_SECONDS


def test_a_huge_declared_body_is_refused_before_it_is_read(node_factory: NodeFactory) -> None:
    node = node_factory().start()
    with Client(node.url) as client:
        client.create_queue("q")
    with socket.create_connection(_address(node), timeout=5) as sock:
        sock.sendall(
            b"POST /v2/queues/q/messages HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n{"
        )
        status = sock.makefile("rb").readline()
    assert status.split()[1] == b"413"


def test_a_body_slower_than_the_body_timeout_gets_408(node_factory: NodeFactory) -> None:
    node = node_factory("--limits-bodytimeout", "1").start()
    with Client(node.url) as client:
        client.create_queue("q")
    with socket.create_connection(_address(node), timeout=10) as sock:
        sock.sendall(
            b"POST /v2/queues/q/messages HTTP/1.1\r\nHost: localhost\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        )
        for _ in range(3):
            sock.sendall(b'{"m')
            time.sleep(0.5)
        status = sock.makefile("rb").readline()
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
    url = f"{node.url}/v2/queues/big/messages"
    body = {"messages": [{"body": "x" * (MIB - 2048)}]}
    deadline = time.monotonic() + 4

    async def publisher(session: aiohttp.ClientSession) -> Counter[int]:
        seen: Counter[int] = Counter()
        while time.monotonic() < deadline:
            seen[await _statuses(session, "POST", url, json=body)] += 1
        return seen

    async def flood() -> Counter[int]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            counts = await asyncio.gather(*(publisher(session) for _ in range(8)))
        return sum(counts, Counter())

    # When 8 clients publish 1 MiB messages as fast as they can
    with Prober(node):
        statuses = asyncio.run(flood())
    # Then every publish is taken, in turn, and memory stays bounded
    assert set(statuses) == {200}, statuses
    with Client(node.url) as client:
        assert client.queue("big")["stats"]["depth"] == statuses[200]
    assert _rss_mib(node) < 400


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
