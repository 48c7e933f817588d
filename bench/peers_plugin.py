"""Dynamiq as a system of the shared W1 driver (``peers.py --plugin bench/peers_plugin.py``).

The producer publishes W1 bodies in v2 batches with at most ``--window``
unacknowledged messages (``PUBLISH_REQUESTS`` requests of window /
``PUBLISH_REQUESTS`` messages in flight); each 200 means every message of the
batch is fsynced. The consumer keeps ``RECEIVERS`` long-poll receives of
``--batch`` outstanding and deletes every id it got in one request per
batch; it goes on receiving while up to ``DELETES_IN_FLIGHT`` deletes wait
for their commit (as AMQP consumers ack without waiting), and waits for every
delete before it reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import peers  # type: ignore[import-not-found]  # provided by the driver that loads this file

if TYPE_CHECKING:
    from bench.http1 import Pool

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the driver loads this file by path: the checkout's modules
    sys.path.insert(0, str(ROOT))
PORT = 18181
# Receive requests the consumer keeps outstanding, as the NATS consumer keeps
# one or two pulls in flight.
RECEIVERS = 2
# Delete requests (batches) awaiting their commit while the consumer goes on
# receiving: at most 1,000 messages, the same window as the producer's.
DELETES_IN_FLIGHT = 10
# The producer's window is split into this many publish requests (as the
# Redis producer pipelines its whole window in one round trip): one is
# committed while the next is parsed.
PUBLISH_REQUESTS = 2
JSON = {"Content-Type": "application/json"}
# Where the secure node's certificates and the application key it made are kept,
# for the client processes the driver spawns.
SECURE = Path(tempfile.gettempdir()) / f"dynamiq-bench-secure-{PORT}"
# The nodes started here: the driver's CPU and memory columns sum their processes.
NODES: set[int] = set()


def _python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def _http(
    method: str,
    path: str,
    body: Any = None,
    base: str = f"http://127.0.0.1:{PORT}",
    headers: dict[str, str] | None = None,
    tls: ssl.SSLContext | None = None,
) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        base + path, data=data, method=method, headers={**JSON, **(headers or {})}
    )
    with urllib.request.urlopen(request, timeout=30, context=tls) as response:
        return json.loads(response.read() or b"null")


def _loop_run(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


class Dynamiq(peers.Adapter):  # type: ignore[misc]
    name = "dynamiq"
    port = PORT
    # The nodes clients talk to: publishes go round-robin over them, and each
    # receiver keeps to one (its deletes go where its receives went).
    urls: tuple[str, ...] = (f"http://127.0.0.1:{PORT}",)
    groups = 0  # messages spread over this many ordered groups (0: none)

    def auth(self) -> dict[str, str]:
        """Headers every request carries besides its content type."""
        return {}

    def tls(self) -> ssl.SSLContext | None:
        """The context ``https://`` nodes are checked with."""
        return None

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        return _http(method, path, body, self.urls[0], self.auth(), self.tls())

    def settings(self) -> str:
        return (
            f"embedded LMDB, fsync per group commit; v2 publish batches of "
            f"{self.window // PUBLISH_REQUESTS}, {PUBLISH_REQUESTS} requests in flight; "
            f"{RECEIVERS} receives of {self.batch} outstanding (wait_seconds=1); one delete "
            f"of every id per batch, up to {DELETES_IN_FLIGHT} awaiting their commit"
        )

    def reset(self, tag: str) -> str:
        name = f"w1-{tag}-{os.getpid()}-{time.monotonic_ns()}"
        self._call("PUT", f"/v2/queues/{name}", {"visibility_timeout": 300})
        return name

    def depth(self, q: str) -> int:
        return int(self._call("GET", f"/v2/queues/{q}")["stats"]["depth"])

    def produce(self, q: str, n: int, rate: float | None, ready: Any, go: Any) -> dict[str, Any]:
        return _loop_run(self._produce(q, n, rate, ready, go))  # type: ignore[no-any-return]

    def consume(self, q: str, n: int, latency: bool, ready: Any, go: Any) -> dict[str, Any]:
        return _loop_run(self._consume(q, n, latency, ready, go))  # type: ignore[no-any-return]

    def _pool(self, base: str) -> Pool:
        from bench.http1 import Pool

        return Pool(base, {**JSON, **self.auth()}, self.tls())

    async def _produce(
        self, q: str, n: int, rate: float | None, ready: Any, go: Any
    ) -> dict[str, Any]:
        import msgspec

        encode = msgspec.json.Encoder().encode
        bodies = peers.Bodies(self.size)
        pools = [self._pool(u) for u in self.urls]
        path = f"/v2/queues/{q}/messages"
        requests = max(PUBLISH_REQUESTS, len(pools))
        try:
            await pools[0].ok("GET", f"/v2/queues/{q}")  # connected before the clock starts

            async def send(first: int, count: int) -> None:
                msgs: list[dict[str, str]] = [
                    {"body": bodies.make(i).decode()} for i in range(first, first + count)
                ]
                if self.groups:
                    for i, m in enumerate(msgs, first):
                        m["group"] = f"g{i % self.groups}"
                pool = pools[(first // max(1, count)) % len(pools)]
                await pool.ok("POST", path, encode({"messages": msgs}))

            clock = peers.Clock()
            await asyncio.to_thread(clock.start, ready, go, self.timeout)
            sent, err = 0, None
            if rate is None:
                per_request = max(1, self.window // requests)
                slots = asyncio.Semaphore(requests)
                tasks = []

                async def slot(first: int, count: int) -> None:
                    async with slots:
                        await send(first, count)

                while sent < n:
                    k = min(per_request, n - sent)
                    tasks.append(asyncio.ensure_future(slot(sent, k)))
                    sent += k
                    if len(tasks) >= 64:
                        await asyncio.gather(*tasks)
                        tasks = []
                        if clock.expired():
                            err = "timeout"
                            break
                await asyncio.gather(*tasks)
            else:
                while sent < n and not clock.expired():
                    k = min(peers.due_count(clock.t0, rate, n) - sent, self.batch)
                    if k <= 0:
                        await asyncio.sleep(max(0.0, clock.t0 + sent / rate - time.monotonic()))
                        continue
                    await send(sent, k)
                    sent += k
                if sent < n:
                    err = "timeout"
            return clock.stop(count=sent, error=err)  # type: ignore[no-any-return]
        finally:
            await asyncio.gather(*(pool.close() for pool in pools))

    async def _consume(self, q: str, n: int, latency: bool, ready: Any, go: Any) -> dict[str, Any]:
        import msgspec

        encode = msgspec.json.Encoder().encode
        decode = msgspec.json.Decoder().decode
        path = f"/v2/queues/{q}"
        pools = [self._pool(u) for u in self.urls]
        receive_body = encode({"max_messages": self.batch, "wait_seconds": 1})
        rec = peers.Recv(n, latency)
        try:
            for pool in pools:
                await pool.ok("GET", path)  # connect without leasing anything
            clock = peers.Clock()
            await asyncio.to_thread(clock.start, ready, go, self.timeout)
            in_flight = asyncio.Semaphore(DELETES_IN_FLIGHT)
            pending: set[asyncio.Task[None]] = set()
            errors: list[str] = []

            async def delete(pool: Pool, ids: list[str]) -> None:
                await pool.ok("POST", path + "/delete", encode({"ids": ids}))

            async def receiver(pool: Pool) -> None:
                while not rec.done:
                    if clock.expired():
                        errors.append("timeout")
                        break
                    got = decode(await pool.ok("POST", path + "/receive", receive_body))
                    ids = []
                    for m in got["messages"]:
                        rec.on(m["body"].encode())
                        ids.append(m["id"])
                    if ids:
                        # Deleted messages stay leased until their delete commits,
                        # so the next receive need not wait for it (as AMQP acks go).
                        await in_flight.acquire()
                        task = asyncio.ensure_future(delete(pool, ids))
                        task.add_done_callback(lambda _: in_flight.release())
                        pending.add(task)
                        task.add_done_callback(pending.discard)

            count = max(RECEIVERS, len(pools))
            receivers = [
                asyncio.ensure_future(receiver(pools[i % len(pools)])) for i in range(count)
            ]
            await asyncio.wait(receivers, return_when=asyncio.FIRST_COMPLETED)
            for task in receivers:  # the others may sit in a long poll nobody will answer
                task.cancel()
            await asyncio.gather(*receivers, return_exceptions=True)
            err = errors[0] if errors else None
            await asyncio.gather(*pending)
            return clock.stop(  # type: ignore[no-any-return]
                count=rec.count, dups=rec.dups, lats=rec.lats, error=err
            )
        finally:
            await asyncio.gather(*(pool.close() for pool in pools))

    extra_flags: tuple[str, ...] = ()
    checkout: str | None = None  # run the node of this checkout instead of this one
    python: str | None = None  # run the node on this interpreter instead of the checkout's
    workers = "1"  # core.workers

    def start_server(self, datadir: str) -> subprocess.Popen[bytes]:
        d = os.path.join(datadir, "dynamiq")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        log = open(os.path.join(d, "node.log"), "wb")  # noqa: SIM115 - lives as long as the node
        cmd = [
            self.python or _python(),
            "-m",
            "dynamiq",
            "serve",
            "--core-httpport",
            str(PORT),
            "--storage-path",
            d,
            "--core-loglevelstring",
            "warn",
            "--core-workers",
            self.workers,
            *self.extra_flags,
        ]
        # ``-m dynamiq`` finds the package of the working directory first.
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.checkout)
        if not peers.wait_port(PORT, 30):
            peers._stop_popen(p)
            raise RuntimeError("dynamiq did not start")
        from bench.procs import MemoryWatch

        self._memory = MemoryWatch(p.pid)
        _node_wide(p.pid)
        return p

    def stop_server(self, handle: subprocess.Popen[bytes]) -> None:
        print(f"  dynamiq memory, {self._memory.stop()}", file=sys.stderr, flush=True)
        peers._stop_popen(handle)


def _node_wide(node: int) -> None:
    """Have the driver read a node's CPU and memory (``node``: its first process's pid)
    summed over its processes, its workers included: the driver reads one process."""
    from bench.procs import cpu_seconds, processes

    NODES.add(node)
    if getattr(peers, "node_wide", False):
        return
    server_cpu, read_status_kb, reset_hwm = peers.server_cpu, peers.read_status_kb, peers.reset_hwm

    def cpu(pid: int | None) -> float:
        return cpu_seconds(pid) if pid in NODES else float(server_cpu(pid))

    def status_kb(pid: int | None, key: str) -> int | None:
        if pid not in NODES:
            return read_status_kb(pid, key)  # type: ignore[no-any-return]
        return sum(read_status_kb(p, key) or 0 for p in processes(pid))

    def reset(pid: int | None) -> None:
        for p in processes(pid) if pid in NODES else [pid]:
            reset_hwm(p)

    peers.server_cpu, peers.read_status_kb, peers.reset_hwm = cpu, status_kb, reset
    peers.node_wide = True


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
        made = _http(
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
    extra_flags = ("--stats-type", "statsd", "--stats-address", "127.0.0.1:18125")

    def settings(self) -> str:
        return super().settings() + "; stats.type=statsd, flushinterval 1 s"


class DynamiqWorkers2(Dynamiq):
    """The same node served by two worker processes (``core.workers = 2``)."""

    name = "dynamiq-workers2"
    workers = "2"

    def settings(self) -> str:
        return super().settings() + "; core.workers=2"


class DynamiqWorkersAuto(Dynamiq):
    """The same node with ``core.workers = auto`` (the default)."""

    name = "dynamiq-workers-auto"
    workers = "auto"

    def settings(self) -> str:
        return super().settings() + "; core.workers=auto"


class DynamiqAiohttp(Dynamiq):
    """The node with aiohttp serving every route (``core.front = off``)."""

    name = "dynamiq-aiohttp"
    extra_flags = ("--core-front", "off")

    def settings(self) -> str:
        return super().settings() + "; core.front=off"


class DynamiqThread(Dynamiq):
    """The node committing its own writes on a thread (``storage.writer = thread``,
    the default before the writer process)."""

    name = "dynamiq-thread"
    extra_flags = ("--storage-writer", "thread")

    def settings(self) -> str:
        return super().settings() + "; storage.writer=thread"


class DynamiqWorkers2Thread(DynamiqWorkers2):
    """Two workers, each committing its own writes on a thread."""

    name = "dynamiq-workers2-thread"
    extra_flags = ("--storage-writer", "thread")

    def settings(self) -> str:
        return super().settings() + "; storage.writer=thread"


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
