"""Real servers for the tests, on free loopback ports, stopped by pid."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.waiting import within

__all__ = [
    "RedisCluster",
    "flush_redis",
    "redis_cluster",
    "redis_server",
    "refused",
    "require",
]

# Where a single redis-server's port is drawn: below the OS's range for outgoing
# connections (from 32768), beside the Redis Cluster servers' (``free_cluster_port``).
REDIS_PORTS = (20000, 32000)
NODE_TIMEOUT_MS = 2000  # a Redis Cluster's cluster-node-timeout: a failover takes about this


@contextmanager
def refused(count: int = 1) -> Iterator[list[str]]:
    """Yield ``count`` loopback addresses (``127.0.0.1:port``) whose ports are bound
    here and listened on by nobody: every connection to one is refused, and no other
    process can take the port while the test runs."""
    with contextlib.ExitStack() as stack:
        held = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in held:
            sock.bind(("127.0.0.1", 0))
        yield [f"127.0.0.1:{sock.getsockname()[1]}" for sock in held]


def free_cluster_port() -> int:
    """Return a port that is free and whose cluster bus port (+10000) is free too."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 45000)
        try:
            for p in (port, port + 10000):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


def require(binary: str) -> str:
    """Return the path of ``binary``; skip the test without it, or fail in CI."""
    path = shutil.which(binary)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{binary} is required in CI (.ci/run installs it)", pytrace=False)
        pytest.skip(f"{binary} is not installed")
    return path


def require_path(path: Path, how: str) -> Path:
    """Return ``path``; skip the test (or the module, called where it starts) when it is
    not there, or fail in CI."""
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{path} is required in CI ({how})", pytrace=False)
        pytest.skip(f"{path} is not there ({how})", allow_module_level=True)
    return path


def require_module(module: str, extra: str) -> None:
    """Skip the calling test module without ``module`` (fail in CI); call it before importing it."""
    if importlib.util.find_spec(module) is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} is required in CI (setup.sh installs the {extra} extra)")
        pytest.skip(
            f"{module} is not installed (pip install -e '.[{extra}]')", allow_module_level=True
        )


def _redis_args(binary: str, port: int, data: Path) -> list[str]:
    settings = {
        "bind": "127.0.0.1",
        "port": str(port),
        "dir": str(data),
        "appendonly": "yes",
        "appendfsync": "always",
        "save": "",
        "protected-mode": "yes",
        "daemonize": "no",
        "logfile": str(data / "redis.log"),
        "repl-diskless-sync-delay": "0",
    }
    return [binary, *(x for key, value in settings.items() for x in (f"--{key}", value))]


def _wait_port(port: int, proc: subprocess.Popen[bytes], fail: bool = True) -> bool:
    """Wait until ``proc`` serves ``port``; False when it ended first (its port was
    taken) and not ``fail``."""

    def answered() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        except OSError:
            return False
        return True

    within(lambda: proc.poll() is not None or answered(), 20.0, 0.05)
    if proc.poll() is None and answered():
        return True
    if proc.poll() is not None and not fail:
        return False
    raise RuntimeError(f"redis-server on port {port} did not start")


def _unbound(port: int) -> bool:
    """Whether nothing holds ``port`` on loopback now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.send_signal(signal.SIGCONT)  # a paused server ends too
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextmanager
def redis_server(
    data: Path, port: int | None = None, replica_of: str | None = None
) -> Iterator[str]:
    """Run redis-server with fsync on every write (a replica of ``replica_of``); yield its URL."""
    binary = require("redis-server")
    data.mkdir(parents=True, exist_ok=True)
    for _ in range(20):  # a port drawn at random may be taken by then: another one
        at = port or random.randrange(*REDIS_PORTS)
        if port is None and not _unbound(at):
            continue
        args = _redis_args(binary, at, data)
        if replica_of:
            args += ["--replicaof", *replica_of.split(":")]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            if _wait_port(at, proc, fail=port is not None):
                yield f"redis://127.0.0.1:{at}/0"
                return
        finally:
            _stop(proc)
    raise RuntimeError("redis-server found no free port in 20 tries")


@dataclass
class RedisCluster:
    """A running 3-primary, 3-replica Redis Cluster."""

    ports: list[int]
    procs: dict[int, subprocess.Popen[bytes]]
    args: dict[int, list[str]]  # each node's command line, to restart it

    @property
    def url(self) -> str:
        """Every node's URL, comma-separated (the store's cluster form)."""
        return ",".join(f"redis://127.0.0.1:{p}" for p in self.ports)

    def role(self, port: int) -> str:
        """Return ``master`` or ``slave`` for a live node."""
        try:
            out = subprocess.run(
                [require("redis-cli"), "-p", str(port), "role"],
                capture_output=True,
                text=True,
                timeout=2,
            ).stdout
        except subprocess.TimeoutExpired:
            return "down"  # paused
        return out.split()[0] if out else "down"

    def kill(self, port: int) -> None:
        """Kill a node without warning."""
        self.procs[port].kill()
        self.procs[port].wait(10)

    def pause(self, port: int) -> None:
        """Stop a node where it stands (SIGSTOP)."""
        self.procs[port].send_signal(signal.SIGSTOP)

    def resume(self, port: int) -> None:
        """Let a paused node go on (SIGCONT)."""
        self.procs[port].send_signal(signal.SIGCONT)

    def restart(self, port: int) -> None:
        """Start a killed node again on its data: it rejoins as its slots' owner says."""
        self.procs[port] = subprocess.Popen(
            self.args[port], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        _wait_port(port, self.procs[port])

    def primaries(self, among: list[int] | None = None) -> list[int]:
        """Return the nodes of ``among`` (default: all) that answer as primaries."""
        return [p for p in among or self.ports if self.role(p) == "master"]

    def whole(self) -> bool:
        """Whether every slot is served and every primary has its replica in step."""
        return _whole(require("redis-cli"), self.ports)

    def fail_primary(self, fault: str, within: float = 60.0) -> tuple[int, float]:
        """Hit a random primary with ``fault`` and bring it back as a replica; return
        once the cluster is whole again: the primary hit, and the seconds until its
        replica was promoted.

        ``kill -9`` kills it, and once its replica is promoted starts it again on
        its data, as a supervisor would; ``SIGSTOP`` stops it for twice the node
        timeout (its replica is promoted meanwhile), then lets it go on, to find
        itself demoted.
        """
        victim = random.choice(self.primaries())
        others = [p for p in self.ports if p != victim]
        started = time.monotonic()
        if fault == "kill -9":
            self.kill(victim)
        else:
            self.pause(victim)
        _poll(lambda: len(self.primaries(others)) == 3, within, "promote a replica")
        promoted = time.monotonic() - started
        if fault == "kill -9":
            self.restart(victim)
        else:
            time.sleep(max(0.0, started + 2 * NODE_TIMEOUT_MS / 1000 - time.monotonic()))
            self.resume(victim)
        _poll(self.whole, within, "become whole again")
        return victim, promoted


@contextmanager
def redis_cluster(data: Path) -> Iterator[RedisCluster]:
    """Run six nodes on loopback, create the cluster, wait until it is whole."""
    binary, cli = require("redis-server"), require("redis-cli")
    ports: list[int] = []
    while len(ports) < 6:
        port = free_cluster_port()
        if all(abs(port - p) not in (0, 10000) for p in ports):
            ports.append(port)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    commands: dict[int, list[str]] = {}
    try:
        for port in ports:
            node = data / str(port)
            node.mkdir(parents=True, exist_ok=True)
            commands[port] = args = [
                *_redis_args(binary, port, node),
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(node / "nodes.conf"),
                "--cluster-node-timeout",
                str(NODE_TIMEOUT_MS),
                "--cluster-replica-validity-factor",
                "0",
            ]
            procs[port] = subprocess.Popen(
                args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        for port in ports:
            _wait_port(port, procs[port])
        subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in ports),
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        cluster = RedisCluster(ports, procs, commands)
        _poll(cluster.whole, 30.0, "become whole")
        yield cluster
    finally:
        for proc in procs.values():
            _stop(proc)


def _poll(check: Callable[[], bool], seconds: float, what: str) -> None:
    if not within(check, seconds, 0.1):
        raise RuntimeError(f"the Redis Cluster did not {what} within {seconds:g} s")


def _whole(cli: str, ports: list[int]) -> bool:
    def info(port: int, section: str) -> str:
        return subprocess.run(
            [cli, "-p", str(port), *section.split()], capture_output=True, text=True, timeout=10
        ).stdout

    if any("cluster_state:ok" not in info(p, "cluster info") for p in ports):
        return False
    replicas = [p for p in ports if "role:slave" in info(p, "info replication")]
    return len(replicas) == 3 and all(
        "master_link_status:up" in info(p, "info replication") for p in replicas
    )


async def flush_redis(url: str) -> None:
    """Empty a server, or every primary of a cluster (replicas refuse and follow)."""
    import redis.asyncio as aioredis

    for node in url.split(","):
        client = aioredis.Redis.from_url(node)
        try:
            await client.flushall()
        except aioredis.ResponseError:
            pass  # a replica (READONLY)
        finally:
            await client.aclose()
