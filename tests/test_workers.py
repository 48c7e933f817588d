"""A node served by several worker processes (``core.workers``): one port, one node.

Every node here is a real ``dynamiq serve`` process whose workers share its
port with ``SO_REUSEPORT``; workers are killed with kill -9 as a node would be.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.procs import processes, state
from dynamiq.client import Client
from dynamiq.config.sources import load_settings
from dynamiq.errors import ConfigError, DynamiqError
from dynamiq.keyspace import KEYSPACE
from dynamiq.storage.lmdb.server import LOCK_FILE
from dynamiq.testing.cluster import LocalCluster
from tests.conftest import NodeFactory, NodeProcess
from tests.waiting import until

pytestmark = pytest.mark.timeout(120)

TWO = ("--core-workers", "2")


def _workers(node: NodeProcess) -> list[int]:
    assert node.proc is not None
    pid = node.proc.pid
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _zombies(node: NodeProcess) -> list[int]:
    """The node's processes that ended and were not waited for (a worker's or a writer)."""
    assert node.proc is not None
    return [pid for pid in processes(node.proc.pid) if state(pid) == "Z"]


def _serves_all(node: NodeProcess) -> bool:
    with Client(node.url) as client:
        status = client.status()
    return status["serving"] == ["0", str(KEYSPACE - 1)] and all(
        w["serving"] == w["slice"] for w in status["workers"]
    )


def _two_workers(node_factory: NodeFactory, queue: str) -> NodeProcess:
    """A node of two workers serving the whole keyspace, with ``queue`` made."""
    node = node_factory(*TWO).start()
    until(lambda: _serves_all(node), 10, what="the workers never served the whole keyspace")
    with Client(node.url) as client:
        client.create_queue(queue)
    return node


def _drain(client: Client, queue: str, expected: set[int], seconds: float) -> set[int]:
    """Receive and delete until every id of ``expected`` came (or ``seconds`` passed);
    return the ids that came."""
    seen: set[int] = set()
    deadline = time.monotonic() + seconds
    while not expected <= seen and time.monotonic() < deadline:
        got = client.receive(queue, 100, visibility_timeout=30, wait_seconds=0.5)
        seen |= {m.id for m in got}
        if got:
            client.delete(queue, [m.id for m in got])
    return seen


def _scrape(node: NodeProcess) -> str:
    with urllib.request.urlopen(f"{node.url}/metrics", timeout=5) as answer:
        text: str = answer.read().decode()
        return text


def test_workers_default_to_one_on_two_cores_else_one_per_core_and_take_a_count() -> None:
    cores = len(os.sched_getaffinity(0))
    assert load_settings(env={}).core.worker_count() == (1 if cores <= 2 else cores)
    settings = load_settings(env={"DYNAMIQ_CORE_WORKERS": "3"})
    assert settings.core.worker_count() == 3
    for bad in ("0", "65", "many"):
        with pytest.raises(ConfigError, match=r"core\.workers"):
            load_settings(env={"DYNAMIQ_CORE_WORKERS": bad})
    with pytest.raises(ConfigError, match=r"core\.name"):
        load_settings(env={"DYNAMIQ_CORE_NAME": "a/b"})


def test_two_workers_share_the_port_split_the_slice_and_show_as_one_node(
    node_factory: NodeFactory,
) -> None:
    node = node_factory(*TWO).start()
    assert len(_workers(node)) == 2
    until(lambda: _serves_all(node), 10, what="the workers never served the whole keyspace")
    with Client(node.url) as client:
        status = client.status()
        assert status["node"] == "dynamiq1"
        assert [(m["name"], m["workers"]) for m in status["members"]] == [("dynamiq1", 2)]
        halves = [w["slice"] for w in status["workers"]]
        assert [w["name"] for w in status["workers"]] == ["dynamiq1/0", "dynamiq1/1"]
        assert halves == [["0", str(KEYSPACE // 2 - 1)], [str(KEYSPACE // 2), str(KEYSPACE - 1)]]
        assert client.stats()["members"] == 1
        client.create_queue("spread")
    ids: list[int] = []
    for i in range(40):  # a connection each: the kernel spreads them over the workers
        with Client(node.url) as client:
            ids += client.publish("spread", [f"m{i}"])
    # Each worker stores what it is sent in its own half: both halves got some.
    assert {i >= KEYSPACE // 2 for i in ids} == {False, True}
    scraped = _scrape(node)
    assert 'dynamiq_messages_sent_total{queue="spread"} 40.0' in scraped  # summed
    until(lambda: "dynamiq_cluster_size 1.0" in _scrape(node), 15, what="nodes counted as workers")
    with Client(node.url) as client:  # a receive goes on into the other worker's half
        got = client.receive("spread", 40, visibility_timeout=30)
        while len(got) < 40 and (more := client.receive("spread", 40, visibility_timeout=30)):
            got += more
        assert sorted(m.id for m in got) == sorted(ids)
        with urllib.request.urlopen(f"{node.url}/v1/status/servers", timeout=5) as answer:
            assert answer.read().decode() == "Member: dynamiq1 127.0.0.1\n"
    # Both workers started a writer and one left at once, the lock held: it was waited for.
    until(lambda: not _zombies(node), 10, what="a process of the node left a zombie")


def test_a_worker_killed_is_started_again_and_its_leases_lapse_with_nothing_lost(
    node_factory: NodeFactory,
) -> None:
    node = _two_workers(node_factory, "work")
    published: set[int] = set()
    for i in range(20):
        with Client(node.url) as client:
            published |= set(client.publish("work", [f"w{i}-{j}" for j in range(5)]))
    with Client(node.url) as client:
        leased = client.receive("work", 100, visibility_timeout=2)
        while more := client.receive("work", 100, visibility_timeout=2):
            leased += more
    assert {m.id for m in leased} == published
    victim, survivor = _workers(node)
    os.kill(victim, signal.SIGKILL)
    until(lambda: victim not in _workers(node) and len(_workers(node)) == 2, 15, what="no restart")
    assert survivor in _workers(node)
    until(lambda: _serves_all(node), 15, what="the restarted worker never served its half again")
    with Client(node.url) as client:  # every lease lapses, the killed worker's included
        assert _drain(client, "work", published, 20) == published
        assert client.queue("work")["stats"]["depth"] == 0
    assert any("worker dynamiq1/" in line and "exited (signal 9)" in line for line in node.log)


def test_sigterm_stops_every_worker_gracefully_and_kill_9_takes_them_along(
    node_factory: NodeFactory, tmp_path: Path
) -> None:
    node = node_factory(*TWO).start()
    workers = _workers(node)
    node.signal(signal.SIGTERM)
    assert node.wait() == 0
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]
    again = node_factory(*TWO, data=tmp_path / "again").start()
    workers = _workers(again)
    again.signal(signal.SIGKILL)
    again.wait()
    until(
        lambda: not [pid for pid in workers if Path(f"/proc/{pid}/stat").exists()],
        5,
        what="workers outlived their node",
    )


def test_a_node_paused_and_continued_serves_on_with_the_same_workers(
    node_factory: NodeFactory,
) -> None:
    # SIGSTOP holds the supervisor's wait for a signal past its timeout; CPython then
    # answers it with a siginfo never filled in, once taken for a stop signal.
    node = _two_workers(node_factory, "paused")
    assert node.proc is not None
    pids = [node.proc.pid, *_workers(node)]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    time.sleep(1.0)  # ten of the supervisor's waits
    for pid in pids:
        os.kill(pid, signal.SIGCONT)
    until(lambda: _serves_all(node), 15, what="the node never served again")
    with Client(node.url) as client:
        ids = set(client.publish("paused", ["after the pause"]))
        assert _drain(client, "paused", ids, 10) == ids
    assert node.proc.poll() is None
    assert _workers(node) == pids[1:]  # none stopped, none started again
    assert not [line for line in node.log if "stopping" in line]


def test_a_port_another_node_serves_is_refused_not_shared(
    node_factory: NodeFactory, tmp_path: Path
) -> None:
    first = node_factory(*TWO).start()
    port = re.sub(r".*:", "", first.url)
    second = node_factory(*TWO, "--core-httpport", port, data=tmp_path / "second")
    with pytest.raises(RuntimeError, match="did not start"):
        second.start()
    assert second.proc is not None and second.proc.returncode == 1
    with socket.create_connection(("127.0.0.1", int(port)), timeout=5):
        pass  # the first still serves


def test_a_cluster_of_nodes_with_two_workers_each_converges_as_nodes(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, 2, workers=2)
    try:
        cluster.start()
        status = cluster.nodes["n1"].status()
        assert status is not None
        assert [(m["name"], m["workers"]) for m in status["members"]] == [("n1", 2), ("n2", 2)]
        urls = [n.url for n in cluster.nodes.values()]
        with Client(urls) as client:
            client.create_queue("c")
            ids = set()
            for i in range(10):
                ids |= set(client.publish("c", [f"c{i}"]))
            assert _drain(client, "c", ids, 10) == ids
    finally:
        cluster.stop()


def _udp_ports(pid: int) -> set[int]:
    """The local ports of the UDP sockets process ``pid`` holds."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            if (link := os.readlink(fd)).startswith("socket:["):
                inodes.add(link.removeprefix("socket:[").removesuffix("]"))
    rows = Path(f"/proc/{pid}/net/udp").read_text().splitlines()[1:]
    return {int(row.split()[1].split(":")[1], 16) for row in rows if row.split()[9] in inodes}


def test_a_workers_gossip_port_is_held_while_it_is_down(node_factory: NodeFactory) -> None:
    """While a worker is down no other socket gets its gossip port. A client
    connection given it then (the kernel picks its local port among the free
    ones) would hold it in TIME_WAIT for a minute, and the worker could not
    start again."""
    node = _two_workers(node_factory, "held")
    victim = _workers(node)[0]
    (port,) = _udp_ports(victim)  # its gossip's
    node.signal(signal.SIGSTOP)  # the supervisor: the worker is not started again yet
    try:
        os.kill(victim, signal.SIGKILL)
        until(lambda: state(victim) == "Z", 10, what="the worker did not die")
        with socket.socket() as client, pytest.raises(OSError, match="in use") as taken:
            client.bind(("127.0.0.1", port))
        assert taken.value.errno == errno.EADDRINUSE
    finally:
        node.signal(signal.SIGCONT)
    until(lambda: _serves_all(node), 15, what="the restarted worker never served again")
    assert victim not in _workers(node)


def _under_load(node: NodeProcess, queue: str, fault: Callable[[], None]) -> None:
    """Publish (three clients, a connection each time) and consume ``queue`` through
    the node; run ``fault`` once 500 messages are acknowledged, go on until 500 more
    are; then every acknowledged message must be received."""
    acknowledged: set[int] = set()
    received: set[int] = set()
    stop = threading.Event()

    def publish(who: int) -> None:
        for i in itertools.count():
            if stop.is_set():
                return
            try:  # a connection each: both workers take some
                with Client(node.url, rounds=1) as client:
                    acknowledged.update(
                        client.publish(queue, [f"{who}-{i}-{j}" for j in range(10)])
                    )
            except DynamiqError:
                pass  # refused or cut by the fault: not acknowledged, nothing promised

    def consume() -> None:
        with Client(node.url) as client:
            while not stop.is_set():
                with contextlib.suppress(DynamiqError):
                    got = client.receive(queue, 100, visibility_timeout=2, wait_seconds=0.2)
                    received.update(m.id for m in got)
                    if got:
                        client.delete(queue, [m.id for m in got])

    threads = [threading.Thread(target=publish, args=(w,)) for w in range(3)]
    threads.append(threading.Thread(target=consume))
    for thread in threads:
        thread.start()
    try:
        until(lambda: len(acknowledged) >= 500, 20, what="no load")
        fault()
        count = len(acknowledged)
        until(lambda: len(acknowledged) >= count + 500, 20, what="no load after the fault")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    with Client(node.url) as client:  # what was leased when the fault came lapses
        received |= _drain(client, queue, acknowledged - received, 20)
    assert not acknowledged - received, (
        f"{len(acknowledged - received)} acknowledged, never received"
    )


def test_kill_9_of_a_worker_under_load_loses_no_acknowledged_message(
    node_factory: NodeFactory,
) -> None:
    node = _two_workers(node_factory, "load")

    def kill_a_worker() -> None:
        victim = _workers(node)[0]
        os.kill(victim, signal.SIGKILL)
        until(
            lambda: victim not in _workers(node) and len(_workers(node)) == 2, 15, what="no restart"
        )
        until(lambda: _serves_all(node), 15, what="the restarted worker never served again")

    _under_load(node, "load", kill_a_worker)


def test_kill_9_of_the_writer_process_under_load_loses_no_acknowledged_message(
    node_factory: NodeFactory,
) -> None:
    node = _two_workers(node_factory, "load")  # storage.writer = process, the default
    lock = node.data / LOCK_FILE
    writer = int(lock.read_text())
    assert writer not in [node.proc.pid if node.proc else 0, *_workers(node)]

    def kill_the_writer() -> None:
        os.kill(writer, signal.SIGKILL)
        # the next write starts another, which names itself in the lock
        until(lambda: lock.read_text().strip() not in ("", str(writer)), 15, what="no new writer")

    _under_load(node, "load", kill_the_writer)
