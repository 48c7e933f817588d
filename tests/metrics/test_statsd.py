"""StatsD packets as they leave a real node, caught on a real UDP socket."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dynamiq.config.sources import load_settings
from dynamiq.metrics.statsd import StatsdMetrics, route_key
from dynamiq.testing.server import node_client
from tests.waiting import eventually


@pytest.fixture
def collector() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()


def drain(sock: socket.socket) -> list[bytes]:
    packets = []
    while True:
        try:
            packets.append(sock.recv(65536))
        except BlockingIOError:
            return packets


def lines(packets: list[bytes]) -> list[tuple[str, str, str]]:
    """Every ``name:value|type`` line as (name, value, type)."""
    out = []
    for packet in packets:
        for line in packet.decode().split("\n"):
            name, _, rest = line.partition(":")
            value, _, kind = rest.partition("|")
            out.append((name, value, kind))
    return out


def test_sink_aggregates_until_flush_and_bounds_packets(collector: socket.socket) -> None:
    port = collector.getsockname()[1]
    sink = StatsdMetrics("127.0.0.1", port, "dq.", max_packet=512)
    for _ in range(3):
        sink.sent({"jobs": 2})
    sink.received("jobs", 3, 10)
    sink.received("jobs", 0, 10)
    for event in ("dead_lettered", "expired", "redriven"):
        sink.lifecycle("jobs", event, 2)
    sink.lifecycle("jobs", "dead_lettered", 1)
    assert drain(collector) == []  # nothing leaves before the flush
    for i in range(100):
        sink.queue_level(f"queue{i:03d}", i, 0)
    sink.flush()
    packets = drain(collector)
    assert len(packets) > 1 and all(len(p) <= 512 for p in packets)
    seen = lines(packets)
    assert ("dq.jobs.sent.count", "6", "c") in seen
    assert ("dq.jobs.received.count", "3", "c") in seen
    assert ("dq.jobs.fill.count", "0", "g") in seen  # the last receive found nothing
    assert ("dq.queue042.depth.count", "42", "g") in seen
    assert ("dq.jobs.dead_lettered.count", "3", "c") in seen
    assert ("dq.jobs.expired.count", "2", "c") in seen
    assert ("dq.jobs.redriven.count", "2", "c") in seen
    sink.flush()
    assert drain(collector) == []  # a flush sends what came since the last one
    sink.close()


def test_route_keys() -> None:
    assert route_key("/v2/queues/{queue}/receive") == "v2.queues.queue.receive"
    assert route_key("") == "unmatched"


@pytest.fixture
async def node_with_statsd(
    tmp_path: Path, collector: socket.socket
) -> AsyncIterator[TestClient[Any, Any]]:
    port = collector.getsockname()[1]
    settings = load_settings(
        env={},
        flags={
            "core.httpport": "0",
            "storage.path": str(tmp_path / "data"),
            "stats.type": "statsd",
            "stats.address": f"127.0.0.1:{port}",
            "stats.prefix": "dynamiq.",
            "stats.flushinterval": "0.1",
        },
    )
    client = await node_client(settings)
    try:
        yield client
    finally:
        await client.close()


async def _flushes_after(collector: socket.socket, seen: list[tuple[str, str, str]]) -> bool:
    """Whether another flush came (its lines are added to ``seen``): what the node
    did before it is all counted by then."""
    more = lines(drain(collector))
    seen.extend(more)
    return bool(more)


async def test_the_original_metrics_for_a_scripted_sequence(
    node_with_statsd: TestClient[Any, Any], collector: socket.socket
) -> None:
    http = node_with_statsd
    # Given a queue with 5 published messages
    await http.put("/v1/queues/q")
    ids = [await (await http.put("/v1/queues/q/message", data=f"m{i}")).text() for i in range(5)]
    # When 3 are received in a batch of 4, 2 of them deleted, plus an unknown id
    got = await (await http.get("/v1/queues/q/messages/4")).json()
    assert len(got) == 4
    await http.delete(f"/v1/queues/q/messages/{got[0]['id']},{got[1]['id']},42")
    await http.get("/v1/queues/nope/messages/1")
    seen: list[tuple[str, str, str]] = []

    async def flushed() -> bool:  # what was done, and a flush of the levels after it
        seen.extend(lines(drain(collector)))
        names = {name for name, _, _ in seen}
        return "dynamiq.q.deleted.count" in names and "dynamiq.q.in_flight.count" in names

    await eventually(flushed, what="the counters and levels flushed")
    await eventually(lambda: _flushes_after(collector, seen), what="one more flush")
    counters: dict[str, int] = {}
    gauges: dict[str, str] = {}
    for name, value, kind in seen:
        if kind == "c":
            counters[name] = counters.get(name, 0) + int(value)
        elif kind == "g":
            gauges[name] = value
    # Then the counters count what happened, and the gauges hold real levels
    assert counters["dynamiq.q.sent.count"] == len(ids) == 5
    assert counters["dynamiq.q.received.count"] == 4
    assert counters["dynamiq.q.deleted.count"] == 2  # the unknown id is not counted
    assert gauges["dynamiq.q.fill.count"] == "100"
    assert gauges["dynamiq.q.depth.count"] == "3"
    assert gauges["dynamiq.q.approximate_depth.count"] == "3"
    assert gauges["dynamiq.q.in_flight.count"] == "2"
    assert gauges["dynamiq.node.cluster_size"] == "1"
    assert "dynamiq.node.commit_ms" in gauges
    assert counters["dynamiq.node.errors.QUEUE_NOT_FOUND"] == 1
    assert counters["dynamiq.node.requests.v1.queues.queue.message.put.200"] == 5
    assert any(
        n.startswith("dynamiq.node.latency.v1.queues.queue.messages.batch.get") and k == "ms"
        for n, _, k in seen
    )


def test_a_queue_s_levels_are_sent_when_they_change(collector: socket.socket) -> None:
    sink = StatsdMetrics("127.0.0.1", collector.getsockname()[1], "dq.")
    sink.queue_level("idle", 0, 0)
    sink.queue_level("busy", 5, 1)
    sink.flush()
    first = {name: value for name, value, kind in lines(drain(collector)) if kind == "g"}
    assert first["dq.idle.depth.count"] == "0" and first["dq.busy.depth.count"] == "5"
    sink.queue_level("idle", 0, 0)  # as before
    sink.queue_level("busy", 7, 1)  # deeper
    sink.flush()
    second = {name: value for name, value, kind in lines(drain(collector)) if kind == "g"}
    sink.close()
    assert second == {
        "dq.busy.depth.count": "7",
        "dq.busy.approximate_depth.count": "7",
        "dq.node.in_flight": "1",
    }
