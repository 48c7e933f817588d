"""A real node process: acknowledged messages survive kill -9; SIGTERM drains requests."""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from urllib.parse import urlsplit

import pytest

from dynamiq.client import Client
from dynamiq.models import Message
from tests.conftest import NodeFactory
from tests.waiting import until

pytestmark = pytest.mark.slow


def test_acknowledged_messages_survive_kill_9(node_factory: NodeFactory) -> None:
    # Given a node that acknowledged 3,000 publishes
    node = node_factory().start()
    with Client(node.url) as client:
        client.create_queue("durable")
        published: list[int] = []
        for batch in range(30):
            published += client.publish("durable", [f"m{batch}-{i}" for i in range(100)])
    # When it is killed without warning and started again on the same data
    node.signal(signal.SIGKILL)
    node.wait()
    node = node_factory(data=node.data).start()
    # Then every acknowledged message is delivered
    delivered: dict[int, bytes] = {}
    with Client(node.url) as client:
        while got := client.receive("durable", 100, visibility_timeout=300):
            delivered.update((m.id, m.body) for m in got)
    assert sorted(delivered) == sorted(published)
    assert delivered[published[0]] == b"m0-0"


def test_receive_counts_survive_kill_9_of_the_node_holding_the_leases(
    node_factory: NodeFactory,
) -> None:
    # Given a queue without max_receives (deliveries write nothing to the store)
    # whose 200 messages were all received once and are still leased
    node = node_factory().start()
    lease = 4.0
    with Client(node.url) as client:
        client.create_queue("plain")
        client.publish("plain", [f"m{i}" for i in range(200)])
        leased_at = time.time()  # the leases end no sooner than ``lease`` from here
        first = client.receive("plain", 100, visibility_timeout=lease)
        first += client.receive("plain", 100, visibility_timeout=lease)
    assert len(first) == 200 and {m.receive_count for m in first} == {1}
    # When the node is killed and started again (it holds its past leases till they end)
    node.signal(signal.SIGKILL)
    node.wait()
    node = node_factory(data=node.data).start()
    # Then each message is delivered again only after its lease, as received twice,
    # first received when it was
    again: list[Message] = []
    with Client(node.url) as client:
        while len(again) < 200 and time.time() < leased_at + lease + 20:
            again += client.receive("plain", 100, wait_seconds=1)
            assert not again or time.time() >= leased_at + lease
    assert sorted(m.id for m in again) == sorted(m.id for m in first)
    assert {m.receive_count for m in again} == {2}
    when = {m.id: m.first_received_ms for m in first}
    assert all(m.first_received_ms == when[m.id] for m in again)


def test_sigterm_finishes_long_polls_and_exits_cleanly(node_factory: NodeFactory) -> None:
    node = node_factory().start()
    with Client(node.url) as client:
        client.create_queue("q")
        client.publish("q", ["kept"])
        client.receive("q", 1)
    result: list[list[Message]] = []

    def poll() -> None:
        with Client(node.url) as poller:
            result.append(poller.receive("q", 10, wait_seconds=15))

    waiter = threading.Thread(target=poll)
    waiter.start()
    time.sleep(0.5)
    node.signal(signal.SIGTERM)
    assert node.wait(10) == 0
    waiter.join(10)
    # Answered, empty, instead of cut off, and long before its 15 s wait was up
    assert not waiter.is_alive() and result == [[]]
    # The store was closed cleanly: the data is intact for the next start.
    node = node_factory(data=node.data).start()
    with Client(node.url) as client:
        assert client.queue("q")["stats"]["depth"] == 1


def test_a_second_signal_exits_at_once(node_factory: NodeFactory) -> None:
    node = node_factory("--limits-shutdowntimeout", "60").start()
    url = urlsplit(node.url)
    # A request whose body never finishes keeps the graceful shutdown waiting.
    stuck = socket.create_connection((url.hostname, url.port))
    stuck.sendall(
        b"PUT /v1/queues/q/message HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\nab"
    )
    time.sleep(0.3)
    node.signal(signal.SIGTERM)
    time.sleep(0.5)
    assert node.proc is not None and node.proc.poll() is None  # still draining
    node.signal(signal.SIGTERM)
    assert node.wait(5) != 0  # gone, long before the 60 s the drain would allow
    stuck.close()


def test_two_processes_share_one_data_directory(node_factory: NodeFactory) -> None:
    # Given two nodes on one directory, reloading configuration every 100 ms
    a = node_factory("--core-syncconfiginterval", "100").start()
    b = node_factory("--core-syncconfiginterval", "100", data=a.data).start()
    with Client(a.url) as first, Client(b.url) as second:
        # When a queue is created and filled through the first
        first.create_queue("shared")
        until(lambda: "shared" in second.queues(), what="the queue on the second node")
        ids = first.publish("shared", [f"m{i}" for i in range(10)])
        # Then the second node serves its messages
        got: list[Message] = []

        def all_served() -> bool:
            got.extend(second.receive("shared", 10, wait_seconds=2))
            return len(got) >= 10

        until(all_served, what="the ten messages through the second node")
        assert sorted(m.id for m in got) == sorted(ids)


def _exchange(url: str, raw: bytes) -> bytes:
    """Send raw bytes to the node; return its status line."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=5) as sock:
        sock.sendall(raw)
        return sock.makefile("rb").readline()


def test_malformed_http_is_400_and_logs_one_line_at_most(
    node_factory: NodeFactory,
) -> None:
    node = node_factory().start()
    bad = [
        b"GET /v2/queues HTTP/1.1\r\nHost: localhost\r\nX-Evil: a\x00b\r\n\r\n",
        b"GET /" + b"a" * 8300 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"GET /v2/queues/\xff\xfe HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"GET /v1/queues/\xc3\x28/messages/1 HTTP/1.1\r\nHost: localhost\r\n\r\n",
    ]
    for _ in range(5):
        for raw in bad:
            status = _exchange(node.url, raw).split()[1]
            assert status in (b"400", b"404"), raw[:40]
    with Client(node.url) as client:  # still serving
        client.create_queue("after")
    time.sleep(0.2)  # the child's output reaches the reader thread
    log = "".join(node.log)
    assert "Traceback" not in log
    assert " 500 " not in log
    assert log.count("malformed requests") <= 1


def test_the_listen_backlog_is_configurable(node_factory: NodeFactory) -> None:
    node = node_factory("--limits-backlog", "777").start()
    port = urlsplit(node.url).port
    out = subprocess.run(
        ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout
    # For a listening socket ss shows the backlog as Send-Q (the third column).
    assert out.split()[2] == "777", out


def test_a_wide_fan_out_acknowledged_survives_kill_9(node_factory: NodeFactory) -> None:
    # Given a node that copies a message into at most one queue before its answer
    node = node_factory("--limits-syncfanout", "1").start()
    queues = [f"wide-{i:03d}" for i in range(300)]
    with Client(node.url) as client:
        client.create_topic("all")
        for queue in queues:
            client.create_queue(queue)
            client.subscribe("all", queue)
        # and acknowledged ten publishes, each stored once and copied behind its answer
        answers = [client.publish_topic("all", [f"news {n}"]) for n in range(10)]
    # When it is killed at once and started again on the same data
    node.signal(signal.SIGKILL)
    node.wait()
    node = node_factory("--limits-syncfanout", "1", data=node.data).start()
    # Then every queue gets each message once, under the id its answer gave
    with Client(node.url) as client:
        for queue in queues:
            expected = {answer[queue][0]: f"news {n}".encode() for n, answer in enumerate(answers)}
            got: dict[int, bytes] = {}

            def copied(q: str = queue, into: dict[int, bytes] = got) -> bool:
                into.update((m.id, m.body) for m in client.receive(q, 10, visibility_timeout=300))
                return len(into) >= 10

            until(copied, what=f"the ten copies in {queue}")
            assert got == expected
