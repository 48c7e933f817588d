"""Dynamiq as a system of the shared W1 driver: the node it starts and the load it drives
(the variants, and the adapters the driver reads, are ``peers_plugin``'s).

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
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import peers  # type: ignore[import-not-found]  # provided by the driver that loads this file

if TYPE_CHECKING:
    from bench.http1 import Pool

ROOT = Path(__file__).resolve().parents[1]
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


def checkout_python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def call(
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


def run_loop(coro: Any) -> Any:
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
        return call(method, path, body, self.urls[0], self.auth(), self.tls())

    def settings(self) -> str:
        return (
            f"embedded LMDB, fsync per group commit; v2 publish batches of "
            f"{self.window // PUBLISH_REQUESTS}, {PUBLISH_REQUESTS} requests in flight; "
            f"{RECEIVERS} receives of {self.batch} outstanding (wait_seconds=1); one delete "
            f"of every id per batch, up to {DELETES_IN_FLIGHT} awaiting their commit"
        ) + "".join(f"; {key}={value}" for key, value in self.tuned)

    def reset(self, tag: str) -> str:
        name = f"w1-{tag}-{os.getpid()}-{time.monotonic_ns()}"
        self._call("PUT", f"/v2/queues/{name}", {"visibility_timeout": 300})
        return name

    def depth(self, q: str) -> int:
        return int(self._call("GET", f"/v2/queues/{q}")["stats"]["depth"])

    def produce(self, q: str, n: int, rate: float | None, ready: Any, go: Any) -> dict[str, Any]:
        return run_loop(self._produce(q, n, rate, ready, go))  # type: ignore[no-any-return]

    def consume(self, q: str, n: int, latency: bool, ready: Any, go: Any) -> dict[str, Any]:
        return run_loop(self._consume(q, n, latency, ready, go))  # type: ignore[no-any-return]

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
    # Settings of the node's (``("core.front", "off")``): given as flags, told by settings().
    tuned: ClassVar[tuple[tuple[str, str], ...]] = ()

    def start_server(self, datadir: str) -> subprocess.Popen[bytes]:
        d = os.path.join(datadir, "dynamiq")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        log = open(os.path.join(d, "node.log"), "wb")  # noqa: SIM115 - lives as long as the node
        cmd = [
            self.python or checkout_python(),
            "-m",
            "dynamiq",
            "serve",
            "--core-httpport",
            str(PORT),
            "--storage-path",
            d,
            "--core-loglevelstring",
            "warn",
            *tuned_flags((("core.workers", "1"), *self.tuned)),
            *self.extra_flags,
        ]
        # ``-m dynamiq`` finds the package of the working directory first.
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.checkout)
        if not peers.wait_port(PORT, 30):
            peers._stop_popen(p)
            raise RuntimeError("dynamiq did not start")
        from bench.procs import MemoryWatch

        self._memory = MemoryWatch(p.pid)
        node_wide(p.pid)
        return p

    def stop_server(self, handle: subprocess.Popen[bytes]) -> None:
        print(f"  dynamiq memory, {self._memory.stop()}", file=sys.stderr, flush=True)
        peers._stop_popen(handle)


def tuned_flags(tuned: tuple[tuple[str, str], ...]) -> list[str]:
    """Return the command-line flags that set ``tuned`` (a later setting of a key wins)."""
    return [
        part for key, value in dict(tuned).items() for part in (f"--{key.replace('.', '-')}", value)
    ]


def node_wide(node: int) -> None:
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
