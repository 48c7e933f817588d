"""Dynamiq's systems for the shared W1 driver (``peers.py --plugin bench/peers_plugin.py``):
the node as it ships (``peers_dynamiq``) and its variants, each a setting changed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the driver loads this file by path: the checkout's modules
    sys.path.insert(0, str(ROOT))

from bench.peers_dynamiq import (  # noqa: E402  (once the checkout is on the path)
    PORT,
    SECURE,
    Dynamiq,
    call,
)


class DynamiqSecure(Dynamiq):
    """The same node with application keys and TLS: every request over HTTPS, carrying
    a key of role ``manage`` (its queues named within its application)."""

    name = "dynamiq-secure"
    urls = (f"https://127.0.0.1:{PORT}",)

    def settings(self) -> str:
        return super().settings() + "; TLS 1.3 and an application key on every request"

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {(SECURE / 'key').read_text()}"}

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(SECURE / "ca.pem"))

    def start_server(self, datadir: str) -> subprocess.Popen[bytes]:
        import trustme  # the test extra's

        shutil.rmtree(SECURE, ignore_errors=True)
        SECURE.mkdir(mode=0o700)
        ca = trustme.CA()
        ca.cert_pem.write_to_path(str(SECURE / "ca.pem"))
        cert = ca.issue_cert("127.0.0.1")
        cert.cert_chain_pems[0].write_to_path(str(SECURE / "node.pem"))
        cert.private_key_pem.write_to_path(str(SECURE / "node.key"))
        admin = secrets.token_urlsafe(32)
        self.extra_flags = (
            *("--tls-certfile", str(SECURE / "node.pem")),
            *("--tls-keyfile", str(SECURE / "node.key")),
            *("--auth-enabled", "true", "--auth-adminkey", admin),
        )
        node = super().start_server(datadir)
        made = call(
            "POST",
            "/v2/keys",
            {"application": "bench", "role": "manage"},
            self.urls[0],
            {"Authorization": f"Bearer {admin}"},
            self.tls(),
        )
        (SECURE / "key").write_text(made["key"])
        return node


class DynamiqStatsd(Dynamiq):
    """The same node sending StatsD (to a local port nobody reads: the cost is the node's)."""

    name = "dynamiq-statsd"
    tuned = (("stats.type", "statsd"), ("stats.address", "127.0.0.1:18125"))


class DynamiqWorkers2(Dynamiq):
    """The same node served by two worker processes (``core.workers = 2``)."""

    name = "dynamiq-workers2"
    tuned = (("core.workers", "2"),)


class DynamiqWorkersAuto(Dynamiq):
    """The same node with ``core.workers = auto`` (the default)."""

    name = "dynamiq-workers-auto"
    tuned = (("core.workers", "auto"),)


class DynamiqAiohttp(Dynamiq):
    """The node with aiohttp serving every route (``core.front = off``)."""

    name = "dynamiq-aiohttp"
    tuned = (("core.front", "off"),)


class DynamiqThread(Dynamiq):
    """The node committing its own writes on a thread (``storage.writer = thread``,
    the default before the writer process)."""

    name = "dynamiq-thread"
    tuned = (("storage.writer", "thread"),)


class DynamiqWorkers2Thread(Dynamiq):
    """Two workers, each committing its own writes on a thread."""

    name = "dynamiq-workers2-thread"
    tuned = (("core.workers", "2"), ("storage.writer", "thread"))


class DynamiqGrouped(Dynamiq):
    """W1 with every message in one of 1,000 ordered groups."""

    name = "dynamiq-grouped"
    groups = 1000

    def settings(self) -> str:
        return f"{super().settings()}; every message in one of {self.groups} ordered groups"


class DynamiqBaseline(Dynamiq):
    """The node of another checkout (``DYNAMIQ_BASELINE``, e.g. the previous commit), same run."""

    name = "dynamiq-baseline"
    checkout = os.environ.get("DYNAMIQ_BASELINE")

    def settings(self) -> str:
        return super().settings() + f"; the node of {self.checkout}"


class DynamiqOtherPython(Dynamiq):
    """The node on another interpreter (``DYNAMIQ_PYTHON``: a venv's python with the
    checkout installed, e.g. a newer CPython), same run."""

    name = "dynamiq-python"
    python = os.environ.get("DYNAMIQ_PYTHON")

    def settings(self) -> str:
        return super().settings() + f"; the node on {self.python}"


class _Handle:
    """A node process plus the store servers it runs on, stopped together."""

    def __init__(self, node: subprocess.Popen[bytes], stack: contextlib.ExitStack) -> None:
        self.node, self.stack, self.pid = node, stack, node.pid


class DynamiqRedis(Dynamiq):
    """The node on a redis-server with appendfsync always (the servers started here)."""

    name = "dynamiq-redis"
    cluster = False

    def settings(self) -> str:
        where = "a 6-node Redis Cluster" if self.cluster else "one redis-server"
        return (
            super()
            .settings()
            .replace("embedded LMDB, fsync per group commit", f"{where}, appendfsync always")
        )

    def start_server(self, datadir: str) -> _Handle:  # type: ignore[override]
        from tests.servers import redis_cluster, redis_server

        d = Path(datadir) / self.name
        shutil.rmtree(d, ignore_errors=True)
        stack = contextlib.ExitStack()
        if self.cluster:
            url = stack.enter_context(redis_cluster(d)).url
        else:
            url = stack.enter_context(redis_server(d))
        self.extra_flags = ("--storage-backend", "redis", "--storage-url", url)
        try:
            return _Handle(super().start_server(datadir), stack)
        except BaseException:
            stack.close()
            raise

    def stop_server(self, handle: _Handle) -> None:  # type: ignore[override]
        try:
            super().stop_server(handle.node)
        finally:
            handle.stack.close()

    def server_pid(self, handle: _Handle) -> int:
        return handle.pid


class DynamiqRedisCluster(DynamiqRedis):
    name = "dynamiq-redis-cluster"
    cluster = True


class DynamiqCluster3(Dynamiq):
    """Three nodes on one host sharing one LMDB directory, clients spread over them."""

    name = "dynamiq-cluster3"
    nodes = 3

    def settings(self) -> str:
        return (
            super()
            .settings()
            .replace(
                "embedded LMDB",
                f"{self.nodes} nodes on one LMDB directory, publishes round-robin, "
                f"one receiver per node",
            )
        )

    def start_server(self, datadir: str) -> Any:
        from dynamiq.testing.cluster import LocalCluster

        d = Path(datadir) / self.name
        shutil.rmtree(d, ignore_errors=True)
        ports = [PORT + i for i in range(self.nodes)]
        checkout = Path(self.checkout) if self.checkout else None
        cluster = LocalCluster(
            d,
            self.nodes,
            extra=["--core-loglevelstring", "warn"],
            http_ports=ports,
            checkout=checkout,
        )
        try:
            cluster.start()
        except BaseException:
            cluster.stop()
            raise
        self.urls = tuple(n.url for n in cluster.nodes.values())
        return cluster

    def stop_server(self, handle: Any) -> None:
        handle.stop()

    def server_pid(self, handle: Any) -> int:
        return int(handle.nodes["n1"].proc.pid)  # the figures of one node of three


class DynamiqCluster3Baseline(DynamiqCluster3):
    """Three nodes of another checkout (``DYNAMIQ_BASELINE``), same run."""

    name = "dynamiq-cluster3-baseline"
    checkout = os.environ.get("DYNAMIQ_BASELINE")

    def settings(self) -> str:
        return super().settings() + f"; the nodes of {self.checkout}"


ADAPTERS = {
    "dynamiq": Dynamiq,
    "dynamiq-statsd": DynamiqStatsd,
    "dynamiq-secure": DynamiqSecure,
    "dynamiq-baseline": DynamiqBaseline,
    "dynamiq-python": DynamiqOtherPython,
    "dynamiq-grouped": DynamiqGrouped,
    "dynamiq-workers2": DynamiqWorkers2,
    "dynamiq-workers-auto": DynamiqWorkersAuto,
    "dynamiq-thread": DynamiqThread,
    "dynamiq-aiohttp": DynamiqAiohttp,
    "dynamiq-workers2-thread": DynamiqWorkers2Thread,
    "dynamiq-redis": DynamiqRedis,
    "dynamiq-redis-cluster": DynamiqRedisCluster,
    "dynamiq-cluster3": DynamiqCluster3,
    "dynamiq-cluster3-baseline": DynamiqCluster3Baseline,
}
