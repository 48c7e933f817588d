"""A real cluster (``conftest``): how it forms, guards its members, and shows one
node's changes on every other."""

from __future__ import annotations

import functools
import itertools
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from dynamiq.client import Client
from dynamiq.cluster.base import OLDEST_PROTOCOL, PROTOCOL
from dynamiq.cluster.wire import PEER_HEADER, PROTOCOL_HEADER, PeerSigner, QueueNames
from dynamiq.errors import NoMajority, QueueFull, QueueNotFound, TopicNotFound
from dynamiq.keyspace import KEYSPACE
from dynamiq.models import Outgoing
from dynamiq.testing.cluster import LocalCluster
from tests.cluster.nodes import (
    ClusterFactory,
    covered_by,
    get,
    has_queue,
    serving,
    urls,
)
from tests.waiting import until

pytestmark = pytest.mark.timeout(180)


def test_three_nodes_form_and_their_slices_tile_the_keyspace(cluster: LocalCluster) -> None:
    views = [n.status() for n in cluster.nodes.values()]
    assert all(v is not None for v in views)
    members = [v["members"] for v in views if v]
    assert members[0] == members[1] == members[2]  # one view
    assert [m["name"] for m in members[0]] == ["n1", "n2", "n3"]
    assert all(m["state"] == "online" for m in members[0])
    spans = [(int(m["slice"][0]), int(m["slice"][1])) for m in members[0]]
    assert spans[0][0] == 0 and spans[-1][1] == KEYSPACE - 1
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))
    sizes = [hi - lo + 1 for lo, hi in spans]
    assert max(sizes) - min(sizes) <= 1
    for node, (lo, hi) in zip(cluster.nodes.values(), spans, strict=True):
        assert get(f"{node.url}/v1/status/partitionrange") == {"bottom": str(lo), "top": str(hi)}
        servers = get(f"{node.url}/v1/status/servers").decode().splitlines()
        assert servers == [f"Member: n{i} 127.0.0.1" for i in (1, 2, 3)]


def test_messages_published_through_every_node_drain_through_one(cluster: LocalCluster) -> None:
    n1, n2, n3 = urls(cluster)
    with Client(n1) as one:
        one.create_queue("orders")
    published: dict[int, str] = {}
    for url in (n1, n2, n3):
        with Client(url) as client:
            until(functools.partial(has_queue, client, "orders"), 1.0)
            bodies = [f"{url}-{i}" for i in range(100)]
            published.update(zip(client.publish("orders", bodies), bodies, strict=True))
    got: dict[int, str] = {}
    with Client(n2) as only:
        while batch := only.receive("orders", 50, visibility_timeout=60):
            got.update((m.id, m.body.decode()) for m in batch)
            only.delete("orders", [m.id for m in batch])
    assert got == published
    assert get(f"{n3}/v2/queues/orders/stats")["depth"] == 0


def test_changes_on_one_node_reach_every_node_within_a_second(
    cluster_factory: ClusterFactory,
) -> None:
    # A config poll of one minute: only the announcement can be this quick.
    cluster = cluster_factory(3, "--core-syncconfiginterval", "60000")
    n1, n2, n3 = urls(cluster)
    with Client(n1) as a, Client(n2) as b, Client(n3) as c:
        a.create_queue("jobs")
        until(lambda: "jobs" in b.queues() and "jobs" in c.queues(), 1.0)
        b.configure_queue("jobs", visibility_timeout=7)
        until(lambda: c.queue("jobs")["settings"]["visibility_timeout"] == 7.0, 1.0)
        c.create_topic("events")
        c.subscribe("events", "jobs")
        until(lambda: _subscribed(n1), 1.0)
        assert list(a.publish_topic("events", [b"e"])) == ["jobs"]
        b.publish("jobs", [b"old"] * 3)
        assert a.purge_queue("jobs") == 4
        (kept,) = c.publish("jobs", [b"new"])  # the purge reached n3 before its answer
        assert [m.id for m in b.receive("jobs", 10)] == [kept]
        a.delete_queue("jobs")
        until(lambda: "jobs" not in b.queues() and "jobs" not in c.queues(), 1.0)


def _subscribed(url: str) -> bool:
    try:
        return "jobs" in get(f"{url}/v2/topics/events")["queues"]
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 404:  # the topic has not reached this node yet
            return False
        raise


def test_node_stats_agree_across_the_cluster(cluster: LocalCluster) -> None:
    n1, n2, n3 = urls(cluster)
    with Client(n1) as a, Client(n2) as b:
        a.create_queue("stats")
        until(lambda: "stats" in b.queues(), 1.0)
        a.publish("stats", [b"x"] * 10)  # into n1's slice
        leased = [m.id for m in b.receive("stats", 4, visibility_timeout=60)]  # n1 leases
        assert len(leased) == 4
        seen = [get(f"{url}/v2/queues/stats/stats") for url in (n1, n2, n3)]
        for st in seen:
            assert (st["depth"], st["in_flight"], st["visible"]) == (10, 4, 6)
        totals = [get(f"{url}/v2/stats") for url in (n1, n2, n3)]
        assert all(t["members"] == 3 and t["totals"]["in_flight"] == 4 for t in totals)
        until(lambda: b"dynamiq_cluster_size 3.0" in get(f"{n2}/metrics"), 3.0)
        b.delete("stats", leased)  # through n2: n1, which holds the leases, hears of it
    until(lambda: get(f"{n3}/v2/queues/stats/stats")["in_flight"] == 0, 1.0)
    st = get(f"{n1}/v2/queues/stats/stats")
    assert (st["depth"], st["in_flight"], st["visible"]) == (6, 0, 6)


def test_sigterm_leaves_a_nodes_leases_to_the_nodes_taking_over(cluster: LocalCluster) -> None:
    n1, _, n3 = urls(cluster)
    with Client(n3) as c:
        c.create_queue("handover")
        ids = c.publish("handover", [b"m"] * 5)  # into n3's own slice
        leased_at = time.monotonic()
        leased = [m.id for m in c.receive("handover", 5, visibility_timeout=8)]
    assert sorted(leased) == sorted(ids)
    node = cluster.nodes["n3"]
    node.signal(signal.SIGTERM)
    assert node.wait(30) == 0
    # Its slice is served again at once (it said it was leaving),
    until(lambda: covered_by(cluster, ["n1", "n2"]), 3.0, 0.05)
    with Client(n1) as a:
        # but its consumer still holds the five: a delete through another node finds
        # one, and no one is given the others before their lease ends.
        assert a.delete("handover", leased[:1]) == leased[:1]
        assert a.receive("handover", 5) == []
        assert time.monotonic() - leased_at < 8  # (so the check above meant something)
        got: set[int] = set()

        def redelivered() -> bool:
            got.update(m.id for m in a.receive("handover", 5))
            return got == set(leased[1:])

        until(redelivered, 15.0, step=0.1)
    assert time.monotonic() - leased_at >= 8


def test_a_node_started_alone_still_sees_failures_once_joined(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(3, start=False)
    second = cluster.nodes["n2"]
    cluster.start_node("n1", seeds=[])  # no peer at all: the library's empty-peer trap
    cluster.wait_converged(30, expected=["n1"])
    cluster.start_node("n2")
    cluster.start_node("n3")
    cluster.wait_converged(30, expected=["n1", "n2", "n3"])
    second.signal(signal.SIGKILL)
    second.wait()
    # The survivors serve the whole keyspace again (the time it takes is the chaos
    # bench's to report)
    until(lambda: covered_by(cluster, ["n1", "n3"]), 10.0, step=0.05)


def test_the_last_of_two_nodes_leases_nothing_without_a_majority(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(2)
    n1, n2 = cluster.nodes["n1"], cluster.nodes["n2"]
    with Client(n1.url) as c:
        c.create_queue("half")
    n2.signal(signal.SIGKILL)
    n2.wait()

    def refused() -> bool:
        with Client(n1.url, rounds=1) as c:
            try:
                c.receive("half", 1)
            except NoMajority:
                return True
        return False

    # One of two known members is no majority: it may not serve n2's slice, nor its own
    # (receives are refused first; the slice is dropped at the next heartbeat round).
    until(refused, 10.0, step=0.1)
    until(lambda: serving(cluster, "n1") is None, 2.0, step=0.05)
    with Client(n1.url) as c:
        published = c.publish("half", [b"m"])  # the store takes publishes still
    cluster.start_node("n2")
    cluster.wait_converged(30)
    with Client(n1.url) as c:
        assert [m.id for m in c.receive("half", 1, wait_seconds=5)] == published


def test_a_second_node_with_a_taken_name_is_refused(cluster: LocalCluster) -> None:
    n1 = cluster.nodes["n1"]
    args = list(n1.args)
    args[args.index("--core-httpport") + 1] = "0"
    args[args.index("--core-port") + 1] = "0"
    args[args.index("--core-seedserver") + 1] = cluster.nodes["n2"].gossip
    done = subprocess.run(
        [sys.executable, "-m", "dynamiq", "serve", *args],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "already named 'n1'" in done.stderr


def test_seeds_without_a_secret_are_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dynamiq", "serve", "--core-seedserver", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "cluster.secret" in done.stderr


def test_internal_routes_take_only_requests_a_member_signed_just_now(
    cluster: LocalCluster,
) -> None:
    url = f"{cluster.nodes['n1'].url}/internal/v1/stats"
    path, body = "/internal/v1/stats", msgspec.msgpack.encode(QueueNames([]))

    def post(header: str | None, protocol: str | None = str(PROTOCOL)) -> int:
        headers = {"Content-Type": "application/msgpack"}
        if header is not None:
            headers[PEER_HEADER] = header
        if protocol is not None:
            headers[PROTOCOL_HEADER] = protocol
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            exc.close()
            return exc.code

    signed = PeerSigner(cluster.secret).sign(path, body)
    assert post(None) == 403
    assert post(PeerSigner("another secret of thirty-two bytes").sign(path, body)) == 403
    assert post(signed) == 200
    assert post(signed) == 403  # seen on the wire: not again
    stale = PeerSigner(cluster.secret, now=lambda: time.time() - 60).sign(path, body)
    assert post(stale) == 403
    # A member of the release before (protocol 1, or none said) or of a newer one is
    # served; one of a protocol this release cannot read is refused plainly, and told
    # once in the log
    for protocol in (None, str(OLDEST_PROTOCOL), str(PROTOCOL + 1)):
        assert post(PeerSigner(cluster.secret).sign(path, body), protocol) == 200
    assert post(PeerSigner(cluster.secret).sign(path, body), "garbled") == 409
    logged = cluster.nodes["n1"].log_path.read_text()
    assert "refusing peer calls from" in logged and "speaks cluster protocol 0" in logged


def _receive_body(client: Client, queue: str, body: bytes, timeout: float) -> Any:
    """Receive through ``client`` until a message with ``body`` comes; return it."""
    found: list[Any] = []

    def check() -> bool:
        found.extend(m for m in client.receive(queue, 10, wait_seconds=0.2) if m.body == body)
        return bool(found)

    until(check, timeout)
    return found[0]


def test_dead_letters_and_delays_made_through_one_node_show_through_every_other(
    cluster: LocalCluster,
) -> None:
    n1, n2, n3 = urls(cluster)
    with Client(n1) as one:
        one.create_queue("jobs-dead")
        one.create_queue(
            "jobs", visibility_timeout=0.5, max_receives=2, dead_letter_queue="jobs-dead"
        )
    with Client(n2) as two:
        until(functools.partial(has_queue, two, "jobs"), 2.0)
        published = time.monotonic()
        two.publish("jobs", ["later"], delay_seconds=1.5)
        two.publish("jobs", ["poison"])
    # The poison is received through two other nodes, counted on from the store...
    counts = []
    for url in (n3, n1):
        with Client(url) as client:
            counts.append(_receive_body(client, "jobs", b"poison", 5.0).receive_count)
    assert counts == [1, 2]
    # ... and after its second lease lapses it is in the dead-letter queue, once.
    with Client(n3) as three:
        dead = _receive_body(three, "jobs-dead", b"poison", 5.0)
        assert dead.dead_letter.source_queue == "jobs" and dead.dead_letter.receive_count == 2
        assert three.receive("jobs-dead", 10) == []
    # The delayed message comes through any node, and not before its time.
    with Client(n1) as one:
        later = _receive_body(one, "jobs", b"later", 5.0)
        assert time.monotonic() - published >= 1.5 and later.receive_count == 1
    # Whichever node moved it, every node counts it.
    for url in (n1, n2, n3):
        assert get(f"{url}/v2/queues/jobs/stats")["dead_lettered_total"] == 1


def _routes(client: Client, topic: str) -> int:
    """How many subscriptions of ``topic`` the client's node knows (0: not the topic yet)."""
    try:
        return len(client.subscriptions(topic))
    except TopicNotFound:
        return 0


def test_routing_set_through_one_node_routes_publishes_through_another(
    cluster: LocalCluster,
) -> None:
    n1, n2, n3 = urls(cluster)
    with Client(n1) as one:
        for queue in ("eu", "audit"):
            one.create_queue(queue)
        one.create_topic("orders")
        one.subscribe("orders", "eu", pattern="orders.eu.#", filter_policy={"tier": ["gold"]})
        one.subscribe("orders", "audit", pattern="#")
    with Client(n3) as three:
        until(lambda: _routes(three, "orders") == 2, 2.0)
        silver = Outgoing(b"silver eu", attributes={"tier": "silver"})
        ids = three.publish_topic(
            "orders", [b"gold eu", silver], routing_key="orders.eu.new", attributes={"tier": "gold"}
        )
    assert ids["eu"][1] is None and None not in ids["audit"]
    with Client(n2) as two:  # stored in n3's slice, received through n2: attributes intact
        got = _receive_body(two, "eu", b"gold eu", 5.0)
        assert (got.attributes, got.routing_key) == ({"tier": "gold"}, "orders.eu.new")
        assert two.receive("eu", 10) == []


def _bounded(client: Client, queue: str, depth: int) -> bool:
    """Whether the node ``client`` calls has the queue, with this ``max_depth``, yet."""
    try:
        return bool(client.queue(queue)["settings"]["max_depth"] == depth)
    except QueueNotFound:
        return False


def test_a_max_depth_holds_for_publishes_through_every_node(cluster: LocalCluster) -> None:
    clients = [Client(u) for u in urls(cluster)]
    try:
        clients[0].create_queue("bounded", max_depth=6)
        for client in clients:
            until(functools.partial(_bounded, client, "bounded", 6), 2.0)
        for client in clients:  # 2 through each node: the depth is the cluster's
            client.publish("bounded", [b"a", b"b"])
        for client in clients:
            with pytest.raises(QueueFull):
                client.publish("bounded", [b"one too many"])
        assert clients[2].queue("bounded")["stats"]["depth"] == 6
        (got,) = clients[1].receive("bounded", 1)
        clients[1].delete("bounded", [got.id])  # room for one, wherever it is published
        clients[2].publish("bounded", [b"fits"])
        with pytest.raises(QueueFull):
            clients[0].publish("bounded", [b"does not"])
    finally:
        for client in clients:
            client.close()


def _anywhere(urls: list[str], queue: str) -> bool:
    for url in urls:
        with Client(url) as client:
            if has_queue(client, queue):
                return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize("store_flags", ["lmdb"], indirect=True)  # a minute: one store
def test_an_unused_queue_is_deleted_on_every_node_and_use_anywhere_keeps_one(
    cluster: LocalCluster,
) -> None:
    n1, n2, n3 = urls(cluster)
    with Client(n1) as one:
        one.create_queue("staging", expires_after_seconds=60)
        one.create_queue("busy", expires_after_seconds=60)
        one.publish("staging", ["left behind"])
        expires_at = datetime.fromisoformat(one.queue("staging")["expires_at"]).timestamp()
    with Client(n3) as three:
        time.sleep(max(0.0, expires_at - time.time() - 15))
        three.publish("busy", ["still in use"])  # through another node, near the end
    until(lambda: not _anywhere([n1, n2, n3], "staging"), expires_at - time.time() + 10, 0.5)
    assert time.time() >= expires_at - 1  # deleted once unused for its window, not before
    with Client(n2) as two:
        assert two.queue("busy")["stats"]["depth"] == 1
    logs = "".join(node.log_path.read_text() for node in cluster.nodes.values())
    assert "queue staging deleted: unused for 60s" in logs
