"""A local cluster on loopback: node processes sharing one data directory (for trying it out).

Used by ``dynamiq cluster``, the cluster tests and ``bench.chaos``. Every node
is a real ``dynamiq serve`` process. On loopback its HTTP and gossip ports
are picked free below the range the OS draws outgoing connections' ports
from (``spare_port``): a restart takes the same ports again, as a restarted
machine would, and a client's connection cannot hold one meanwhile. In a
namespace they are chosen by the OS when it first starts (port 0) and read
from the line it prints once it serves.
The first node starts alone; the others are seeded with the nodes already
known, so any of them can be killed, paused, restarted or stopped. With a
``Network`` each node runs in its own network namespace, at its address on
the network's bridge.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import secrets
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from dynamiq.cluster.swim import claim_port
from dynamiq.testing.netns import Network

__all__ = ["LocalCluster", "LocalNode", "PortTaken", "spare_port"]

HOST = "127.0.0.1"
# What a node prints once it serves: its HTTP URL and, with gossip, its gossip address.
SERVING = re.compile(rb"serving https?://[^:]+:(\d+);.*?(?:gossip [^:]+:(\d+))?$", re.M)
START_SECONDS = 30.0
FIRST_START_TRIES = 3  # a node whose drawn port another process took draws again


class PortTaken(RuntimeError):
    """A node did not start: a port it was to use is another process's."""


# Where ``spare_port`` looks: below the Redis Cluster test servers' ports (from
# 20000) and below the OS's range for outgoing connections (from 32768 by default).
SPARE_PORTS = (10000, 20000)


def spare_port(host: str = HOST, count: int = 1, given: set[int] | None = None) -> int:
    """Return a port free on ``host`` for TCP and UDP now, and the ``count - 1``
    after it too, outside the range the OS draws outgoing connections' ports from
    (0 when none was found). Ports in ``given`` (handed out already, to processes
    that have not bound them yet) are not chosen again; the ones chosen join it."""
    given = set() if given is None else given
    for _ in range(200):
        first = random.randrange(SPARE_PORTS[0], SPARE_PORTS[1] - count)
        if given.intersection(range(first, first + count)):
            continue
        try:
            for port in range(first, first + count):
                claim_port(host, port)
        except OSError:
            continue
        given.update(range(first, first + count))
        return first
    return 0


@dataclass
class LocalNode:
    """One node process of a local cluster; the same ports across restarts."""

    name: str
    http_port: int  # 0 until the node first reported the port the OS gave it
    gossip_port: int
    args: list[str]
    log_path: Path
    host: str = HOST
    prefix: list[str] = field(default_factory=list)  # runs the process (a namespace)
    cwd: Path | None = None  # ``-m dynamiq`` runs the package of this directory first
    key: str = ""  # sent with status reads when the node needs keys
    ca_file: str = ""  # with [tls]: the node serves https, checked against this
    proc: subprocess.Popen[bytes] | None = None
    drawn: bool = False  # its HTTP port was drawn here (not given)
    ran: bool = False  # it has served once: its ports are its own from then on
    start_seconds: float = START_SECONDS  # how long a start may take to serve
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The node's HTTP base URL."""
        return f"{'https' if self.ca_file else 'http'}://{self.host}:{self.http_port}"

    @property
    def gossip(self) -> str:
        """The node's gossip address."""
        return f"{self.host}:{self.gossip_port}"

    def start(self, env: dict[str, str]) -> None:
        """Start the process (its output goes to ``log_path``) and wait until it serves.

        Raises:
            RuntimeError: it exited, or did not serve within ``start_seconds``
                (``PortTaken``: a port it was to use is another process's).
        """
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        if self._log is not None:  # a start before, failed or stopped
            self._log.close()
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "dynamiq", "serve", *self.args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=self.cwd,
            start_new_session=True,  # its workers, if any, in a process group of their own
        )
        self._read_ports(offset)

    def _read_ports(self, offset: int) -> None:
        deadline = time.monotonic() + self.start_seconds
        while time.monotonic() < deadline:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                found = SERVING.search(log.read())
            if found:
                self.http_port = int(found[1])
                self.gossip_port = int(found[2]) if found[2] else 0
                self.ran = True
                return
            if not self.alive():
                break
            time.sleep(0.02)  # a child process's output: there is nothing to await
        with self.log_path.open("rb") as log:
            log.seek(offset)
            said = log.read().decode(errors="replace").strip().splitlines()[-3:]
        failure = PortTaken if any("is taken" in line for line in said) else RuntimeError
        raise failure(f"{self.name} did not start ({' / '.join(said)}): see {self.log_path}")

    def alive(self) -> bool:
        """Whether the process is running (paused counts as running)."""
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the node if it runs: SIGSTOP, SIGCONT and SIGKILL to its
        workers too (the whole node stops, goes on or dies at once); the others to
        the node's process, which passes them on."""
        if self.alive():
            assert self.proc is not None
            if sig in (signal.SIGSTOP, signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)

    def workers(self) -> list[int]:
        """Return the pids of the node's worker processes (none for a node of one)."""
        if not self.alive():
            return []
        assert self.proc is not None
        pid = self.proc.pid
        try:
            return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            return []

    def wait(self, timeout: float = 30.0) -> int | None:
        """Wait for the process to exit; return its status (None if it never started)."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(timeout)
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None

    def stop(self, timeout: float = 15.0) -> None:
        """SIGCONT, then SIGTERM; kill -9 if it does not exit within ``timeout``."""
        if not self.alive():
            self.wait()
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.wait()

    def status(self, timeout: float = 1.0) -> dict[str, Any] | None:
        """Return the node's ``/v2/status``, or None when it does not answer."""
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        request = urllib.request.Request(f"{self.url}/v2/status", headers=headers)
        tls = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=tls) as r:
                data: dict[str, Any] = json.load(r)
                return data
        except (OSError, urllib.error.URLError, ValueError):
            return None


class LocalCluster:
    """Nodes ``n1`` .. ``nN`` on loopback, sharing ``data`` (LMDB) or the configured store."""

    def __init__(
        self,
        data: Path,
        nodes: int = 3,
        secret: str | None = None,
        extra: Sequence[str] = (),
        http_ports: Sequence[int] = (),
        env: dict[str, str] | None = None,
        network: Network | None = None,
        checkout: Path | None = None,
        workers: int = 1,
    ) -> None:
        """Define the nodes (``checkout``: run another checkout's package, same flags;
        ``workers``: processes per node, whose gossip ports follow the node's)."""
        self.data = data
        self.network = network
        self.checkout = checkout
        self.secret = secret or secrets.token_hex(16)
        self.workers = workers
        self.extra = [*extra, "--core-workers", str(workers)]
        self.env = {**os.environ, **(env or {}), "DYNAMIQ_CLUSTER_SECRET": self.secret}
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        if network is not None:  # addresses beyond loopback: keys are on unless said
            self.env.setdefault("DYNAMIQ_AUTH_ENABLED", "false")
        (data / "logs").mkdir(parents=True, exist_ok=True)
        self.nodes: dict[str, LocalNode] = {}
        self._given: set[int] = set(http_ports)  # ports handed to this cluster's nodes
        for i in range(nodes):
            self._define(f"n{i + 1}", http_ports[i] if i < len(http_ports) else 0)

    def _define(self, name: str, http_port: int) -> LocalNode:
        node = LocalNode(name, http_port, 0, [], self.data / "logs" / f"{name}.log")
        node.cwd = self.checkout
        node.key = self.env.get("DYNAMIQ_AUTH_ADMINKEY", "")
        node.ca_file = self.env.get("DYNAMIQ_TLS_PEERCAFILE", "")
        if self.network is not None:
            node.host, node.prefix = self.network.address(name), self.network.prefix(name)
        else:
            node.http_port = http_port or spare_port(given=self._given)
            node.drawn = not http_port
            # a gossip and a peer port for each worker, apart from every other node's
            node.gossip_port = spare_port(count=2 * self.workers, given=self._given)
        self.nodes[name] = node
        return node

    def _args(self, node: LocalNode, seeds: Sequence[str] | None) -> list[str]:
        if seeds is None:
            seeds = [n.gossip for n in self.nodes.values() if n is not node and n.proc is not None]
        return [
            "--core-name",
            node.name,
            "--core-httpaddress",
            node.host,
            "--core-httpport",
            str(node.http_port),
            "--core-port",
            str(node.gossip_port),
            "--core-seedserver",
            ",".join(seeds),
            "--storage-path",
            str(self.data / "data"),
            *self.extra,
        ]

    def start(self, timeout: float = 30.0) -> float:
        """Start every node; wait until each serves its slice of the full view; return seconds."""
        started = time.monotonic()
        for node in self.nodes.values():
            self.start_node(node.name)
        self.wait_converged(timeout - (time.monotonic() - started))
        return time.monotonic() - started

    def start_node(self, name: str, seeds: Sequence[str] | None = None) -> LocalNode:
        """(Re)start one node, once it serves; seeded with every node known by default.

        Its ports are the OS's choice the first time, the same ones after.
        """
        node = self.nodes[name]
        for attempt in range(FIRST_START_TRIES):
            node.args = self._args(node, seeds)
            try:
                node.start(self.env)
                return node
            except PortTaken:
                # Another process took a port drawn for a node that never ran:
                # draw its ports again (those given, and a restart's, stay).
                if node.ran or self.network is not None or attempt + 1 == FIRST_START_TRIES:
                    raise
                if node.drawn:
                    node.http_port = spare_port(given=self._given)
                node.gossip_port = spare_port(count=2 * self.workers, given=self._given)
        raise AssertionError("unreachable")

    def add_node(self) -> LocalNode:
        """Define and start one more node, seeded with the others."""
        node = self._define(f"n{len(self.nodes) + 1}", 0)
        return self.start_node(node.name)

    def running(self) -> list[LocalNode]:
        """Return the nodes whose process runs."""
        return [n for n in self.nodes.values() if n.alive()]

    def converged(self, expected: Sequence[str] | None = None) -> bool:
        """Whether every expected node sees exactly the expected live set and serves its slice."""
        names = sorted(expected if expected is not None else [n.name for n in self.running()])
        for name in names:
            st = self.nodes[name].status()
            if st is None:
                return False
            live = sorted(m["name"] for m in st["members"] if m["slice"])
            mine = next((m for m in st["members"] if m["name"] == name), None)
            if live != names or mine is None or st["serving"] != mine["slice"]:
                return False
        return True

    def describe(self, names: Sequence[str] | None = None, lines: int = 12) -> str:
        """Say what each node (every one by default) sees now: the members and their
        gossip states, what it serves, and its log's last ``lines`` lines."""
        said = []
        for name in names if names is not None else list(self.nodes):
            node = self.nodes[name]
            st = node.status()
            if st is None:
                seen = "no status within 1 s"
            else:
                members = ", ".join(f"{m['name']} {m['state']}" for m in st["members"])
                seen = f"members {members}; serving {st['serving']}"
            tail = node.log_path.read_text(errors="replace").splitlines()[-lines:]
            said.append("\n".join([f"{name}: {seen}", *(f"  | {line}" for line in tail)]))
        return "\n".join(said)

    def wait_converged(self, timeout: float = 30.0, expected: Sequence[str] | None = None) -> float:
        """Wait until ``converged``; return the seconds it took.

        Raises:
            TimeoutError: it did not happen within ``timeout``.
        """
        start = time.monotonic()
        while not self.converged(expected):
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"the cluster did not converge in {timeout:g} s")
            for node in self.nodes.values():
                if node.proc is not None and node.proc.poll() not in (None, 0, -9, -15):
                    raise RuntimeError(f"{node.name} exited: see {node.log_path}")
            time.sleep(0.05)
        return time.monotonic() - start

    def stop(self) -> None:
        """Stop every node (SIGTERM, kill -9 after a grace period)."""
        for node in self.nodes.values():
            node.signal(signal.SIGCONT)
            node.signal(signal.SIGTERM)
        for node in self.nodes.values():
            node.stop()
