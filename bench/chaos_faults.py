"""The faults chaos inflicts on a local cluster, and the watch on the keyspace they leave
unserved (``bench.chaos``)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time

from dynamiq.storage.lmdb.server import LOCK_FILE
from dynamiq.testing.cluster import LocalCluster, LocalNode

__all__ = [
    "FAULTS",
    "NETWORK_FAULTS",
    "WORKER_FAULTS",
    "WRITER_FAULTS",
    "CoverageWatch",
    "apply_fault",
]

KEYSPACE = 1 << 63
FAULTS = ("kill -9", "SIGSTOP", "SIGTERM")
WORKER_FAULTS = ("kill -9 worker",)
WRITER_FAULTS = ("kill -9 writer",)
NETWORK_FAULTS = ("isolate", "one-way", "lossy")
LOSS_PERCENT = 33


class CoverageWatch:
    """Watches which ids the running, unpaused nodes serve; keeps the longest gap."""

    def __init__(self, cluster: LocalCluster) -> None:
        self._cluster = cluster
        self.down: set[str] = set()
        self.worst = 0.0
        self._gap_since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> CoverageWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _covered(self) -> bool:
        spans = []
        for node in self._cluster.running():
            if node.name in self.down:
                continue
            st = node.status(timeout=0.5)
            if st and st["serving"]:
                spans.append((int(st["serving"][0]), int(st["serving"][1])))
        reach = 0
        for lo, hi in sorted(spans):
            if lo > reach:
                return False
            reach = max(reach, hi + 1)
        return reach >= KEYSPACE

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            now = time.monotonic()
            if self._covered():
                if self._gap_since is not None:
                    self.worst = max(self.worst, now - self._gap_since)
                    self._gap_since = None
            elif self._gap_since is None:
                self._gap_since = now


def _workers_of(node: LocalNode, patience: float = 10.0) -> list[int]:
    """The node's worker pids, waiting a little for them (the kernel's list of the
    node's children once read empty in the round after the node was stopped and
    continued).

    Raises:
        RuntimeError: the node shows no worker within ``patience``.
    """
    deadline = time.monotonic() + patience
    while not (workers := node.workers()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{node.name} shows no worker to kill")
        time.sleep(0.1)
    return workers


def _writer_of(cluster: LocalCluster, patience: float = 10.0) -> int:
    """The pid of the data directory's writer process, waiting a little for one (the
    next write after a kill starts it).

    Raises:
        RuntimeError: no live writer within ``patience``.
    """
    lock = cluster.data / "data" / LOCK_FILE
    deadline = time.monotonic() + patience
    while True:
        with contextlib.suppress(OSError, ValueError):
            pid = int(lock.read_text().strip())
            os.kill(pid, 0)
            return pid
        if time.monotonic() > deadline:
            said = lock.read_text().strip() if lock.exists() else "no lock file"
            raise RuntimeError(f"no writer process holds the data directory ({said!r})")
        time.sleep(0.1)


def apply_fault(cluster: LocalCluster, watch: CoverageWatch, node: LocalNode, fault: str) -> None:
    """Inflict ``fault`` on ``node`` (or on the store's writer, or its network) and recover
    from it; ``watch`` counts the node down meanwhile."""
    if fault == "kill -9 writer":  # every node's writes fail with 503 until the next starts one
        os.kill(_writer_of(cluster), signal.SIGKILL)
    elif fault in NETWORK_FAULTS:
        assert cluster.network is not None
        if fault == "isolate":
            cluster.network.isolate(node.name)
        elif fault == "one-way":
            cluster.network.one_way(node.name)
        else:
            cluster.network.lossy(node.name, LOSS_PERCENT)
        time.sleep(random.uniform(2.0, 6.0))
        cluster.network.heal()
    elif fault == "kill -9 worker":
        watch.down.add(node.name)
        os.kill(random.choice(_workers_of(node)), signal.SIGKILL)  # its supervisor restarts it
    elif fault == "kill -9":
        watch.down.add(node.name)
        node.signal(signal.SIGKILL)
        node.wait()
        time.sleep(random.uniform(1.0, 4.0))
        cluster.start_node(node.name)
    elif fault == "SIGSTOP":
        watch.down.add(node.name)
        node.signal(signal.SIGSTOP)
        time.sleep(random.uniform(1.5, 4.0))
        node.signal(signal.SIGCONT)
    else:
        node.signal(signal.SIGTERM)
        node.wait()
        watch.down.add(node.name)
        time.sleep(random.uniform(0.5, 2.0))
        cluster.start_node(node.name)
    watch.down.discard(node.name)
