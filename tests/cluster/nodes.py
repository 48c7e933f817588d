"""What the cluster tests do to a cluster and read of it: loads, slices served, faults."""

from __future__ import annotations

import contextlib
import json
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from dynamiq.client import Client
from dynamiq.keyspace import KEYSPACE
from dynamiq.testing.cluster import LocalCluster
from dynamiq.testing.workload import Workload
from tests.waiting import until, within

ClusterFactory = Callable[..., LocalCluster]  # the ``cluster_factory`` fixture


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        body = r.read()
        return json.loads(body) if r.headers.get_content_type() == "application/json" else body


def urls(cluster: LocalCluster) -> list[str]:
    return [n.url for n in cluster.nodes.values()]


def has_queue(client: Client, name: str) -> bool:
    return name in client.queues()


@contextlib.contextmanager
def steady_load(
    cluster: LocalCluster, queue: str | list[str], visibility: float = 5.0, **shape: Any
) -> Iterator[Workload]:
    """Run 600 msg/s of publishes, receives and deletes on a new queue (or spread over
    several); drain them afterwards.

    ``shape`` goes to ``Workload`` (groups, dedup, batch, ...).
    """
    names = [queue] if isinstance(queue, str) else queue
    with Client(urls(cluster)) as client:
        for name in names:
            client.create_queue(name)
    until(lambda: known_everywhere(cluster, names), 10.0, 0.05, what=f"every node knows {names}")
    load = Workload(urls(cluster), queue, rate=600, visibility=visibility, **shape).start()
    try:
        yield load
    finally:
        load.stop()
    assert load.drain(60)


def known_everywhere(cluster: LocalCluster, queues: list[str]) -> bool:
    """Whether every node of ``cluster`` knows each of ``queues`` (the creation's
    announcement reached it)."""
    for url in urls(cluster):
        with Client(url) as client:
            if not set(queues) <= set(client.queues()):
                return False
    return True


def flowing(load: Workload, messages: int = 600, timeout: float = 30.0) -> None:
    """Wait until ``load`` has ``messages`` more publishes acknowledged (about a second
    of its 600 msg/s), failing the test if the cluster stops taking them."""
    before = len(load.ledger.acked)
    until(
        lambda: len(load.ledger.acked) >= before + messages,
        timeout,
        0.05,
        what=f"{messages} more publishes acknowledged (from {before})",
    )


def serving(cluster: LocalCluster, name: str) -> tuple[int, int] | None:
    st = cluster.nodes[name].status()
    if not st or not st["serving"]:
        return None
    return int(st["serving"][0]), int(st["serving"][1])


def covered_by(cluster: LocalCluster, names: list[str]) -> bool:
    spans = sorted(s for s in (serving(cluster, n) for n in names) if s)
    reach = 0
    for lo, hi in spans:
        if lo != reach:
            return False
        reach = hi + 1
    return reach == KEYSPACE


def kill_9_and_restart(cluster: LocalCluster, load: Workload, name: str) -> bool:
    """kill -9 a node; once the others serve its slice and took a second of ``load``
    without it, restart it, and wait for the cluster to settle and take a second more.
    Return whether the others served the whole keyspace meanwhile."""
    victim = cluster.nodes[name]
    others = [n for n in cluster.nodes if n != name]
    victim.signal(signal.SIGKILL)
    victim.wait()
    served = until(
        lambda: covered_by(cluster, others),
        10.0,
        0.05,
        what=f"{' and '.join(others)} serve the whole keyspace with {name} killed",
    )
    flowing(load)
    cluster.start_node(name)
    cluster.wait_converged(30)
    flowing(load)
    return served


# Nodes on one LMDB directory share its single writer's lock: a node stopped in the
# middle of a commit holds it, and the others' writes (the replay of its lease
# journal before they take its slice among them) wait until it goes on.
LOCKED_OUT_SECONDS = 10.0
PAUSED_SECONDS = 1.0  # how long a paused node stays paused once the others serve its slice


def pause_and_resume(cluster: LocalCluster, load: Workload, name: str) -> None:
    """SIGSTOP a node until the others serve its slice, a second more, then SIGCONT it
    and wait for the cluster to settle and take a second of ``load``.

    On a store of their own (Redis) the others must take the slice over. On one
    LMDB directory they may be locked out of writing by the stopped node: after
    ``LOCKED_OUT_SECONDS`` it is let go on, as an operator would, and the test's
    checks (nothing lost, order kept) still hold.
    """
    victim = cluster.nodes[name]
    others = [n for n in cluster.nodes if n != name]
    victim.signal(signal.SIGSTOP)
    if "--storage-backend" not in cluster.extra:  # one shared LMDB directory
        within(lambda: covered_by(cluster, others), LOCKED_OUT_SECONDS, 0.05)
    else:
        until(
            lambda: covered_by(cluster, others),
            30.0,
            step=0.05,
            what=f"{' and '.join(others)} serve the whole keyspace with {name} paused",
            explain=lambda: cluster.describe(),
        )
    time.sleep(PAUSED_SECONDS)  # the fault's length: on one LMDB directory nothing may flow
    victim.signal(signal.SIGCONT)
    cluster.wait_converged(30)
    flowing(load)
