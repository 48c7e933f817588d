"""A node under floods: how fast it answers others meanwhile, and what it holds.

    python -m bench.overload [--port 18183] [--workers 2] [--front off]
    python -m bench.overload --bursts 10   # the arrival burst alone, 10 times

Starts a node on a scratch directory and runs three floods one after the
other, each bounded: 2,000 receives waiting at once on an empty queue; 300
connections sending a request's headers 4 bytes at a time and 100 sending
nothing (``limits.idletimeout = 2``); 8 clients publishing 1 MiB messages as
fast as they can for 10 s. During each, a probe makes a ``GET /v2/stats``
on a new connection every 100 ms, from a process of its own; the table gives
the probes' median, 99th percentile and worst time, the statuses the flood
got, the CPU the node's processes used during the flood, per request (or
connection) of it, and the node's peak RSS (and the most anonymous memory a
probe saw: the rest is LMDB's mapped pages, which the kernel drops at will).
``tests/test_overload.py`` drives the same floods and checks what the node
answers.

``--bursts N`` runs the first flood's arrival alone, N times: 2,000 receives
(waiting 1 s each) connect at once while the probe goes on every 25 ms, and
each burst's line gives its worst probe, the one that came with the
connections; the last line the node's CPU per waiting receive over them.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from bench.options import options
from bench.procs import cpu_seconds, memory_mib

PROBE_TIMEOUT = 5.0
MIB = 1 << 20


def address_of(url: str) -> tuple[str, int]:
    """The host and port of a node's URL."""
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or 80


def probe(url: str) -> float:
    """Seconds a ``GET /v2/stats`` on a new connection took.

    Raises:
        OSError: no answer within ``PROBE_TIMEOUT``.
        ValueError: an answer other than 200.
    """
    started = time.monotonic()
    with socket.create_connection(address_of(url), timeout=PROBE_TIMEOUT) as sock:
        sock.sendall(b"GET /v2/stats HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        status = sock.makefile("rb").readline()
    if status.split()[1:2] != [b"200"]:
        raise ValueError(f"the probe got {status!r}")
    return time.monotonic() - started


def _probe_until(url: str, pid: int | None, every: float, stop: Event, results: Connection) -> None:
    """Probe ``url`` every ``every`` seconds until ``stop`` is set, then send what was seen."""
    seconds: list[float] = []
    failures: list[str] = []
    anonymous_mib = 0.0
    results.send("ready")
    while not stop.wait(every):
        try:
            seconds.append(probe(url))
        except (OSError, ValueError) as exc:
            failures.append(repr(exc))
        if pid is not None:
            anonymous_mib = max(anonymous_mib, memory_mib(pid, "RssAnon"))
    results.send((seconds, failures, anonymous_mib))


class Prober:
    """Probes a node every 100 ms (or ``every`` seconds) while in its ``with`` block.

    The probes run in a process of their own, so that what they measure is
    the node alone, not the flood's client sharing an interpreter with them.
    """

    def __init__(self, url: str, pid: int | None = None, every: float = 0.1) -> None:
        self.url = url
        self.pid = pid  # the node's: its anonymous memory (and its workers') is sampled
        self.anonymous_mib = 0.0  # the most seen
        self.seconds: list[float] = []
        self.failures: list[str] = []
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._results, results = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_probe_until, args=(url, pid, every, self._stop, results), daemon=True
        )

    def __enter__(self) -> Prober:
        self._process.start()
        if self._results.recv() != "ready":
            raise RuntimeError("the prober did not start")
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self.seconds, self.failures, self.anonymous_mib = self._results.recv()
        self._process.join()

    def summary(self) -> str:
        """Median, 99th percentile and worst probe, in milliseconds."""
        ms = sorted(s * 1000 for s in self.seconds)
        p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
        return f"{statistics.median(ms):6.1f} {p99:8.1f} {ms[-1]:8.1f}"


async def _status(session: aiohttp.ClientSession, url: str, body: Any) -> int:
    async with session.post(url, json=body) as response:
        await response.read()
        if response.status == 503 and not response.headers.get("Retry-After", "").isdigit():
            raise AssertionError("a 503 without Retry-After")
        return response.status


async def waiting_receives(url: str, queue: str, count: int, wait: float) -> Counter[int]:
    """Make ``count`` receives on ``queue`` at once, each waiting up to ``wait`` s; return
    the statuses they got."""
    body = {"max_messages": 1, "wait_seconds": wait}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        target = f"{url}/v2/queues/{queue}/receive"
        return Counter(
            await asyncio.gather(*(_status(session, target, body) for _ in range(count)))
        )


async def publish_flood(
    url: str, queue: str, clients: int, seconds: float, size: int = MIB - 2048
) -> Counter[int]:
    """Publish one ``size``-byte message per request from ``clients`` clients, back to
    back, for ``seconds``; return the statuses they got."""
    body = {"messages": [{"body": "x" * size}]}
    target = f"{url}/v2/queues/{queue}/messages"
    deadline = time.monotonic() + seconds

    async def client(session: aiohttp.ClientSession) -> Counter[int]:
        seen: Counter[int] = Counter()
        while time.monotonic() < deadline:
            seen[await _status(session, target, body)] += 1
        return seen

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        counts = await asyncio.gather(*(client(session) for _ in range(clients)))
    return sum(counts, Counter())


def slow_headers(url: str, slow: int, silent: int, seconds: float) -> int:
    """Hold ``slow`` connections sending a request's headers 4 bytes at a time and
    ``silent`` ones sending nothing, for ``seconds``; then return how many of them the
    node has not closed (each is given 5 s more)."""
    address = address_of(url)
    trickling = [socket.create_connection(address, timeout=10) for _ in range(slow)]
    quiet = [socket.create_connection(address, timeout=10) for _ in range(silent)]
    header = b"GET /v2/stats HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 1000
    try:
        deadline, offset = time.monotonic() + seconds, 0
        while time.monotonic() < deadline and offset < len(header):
            for sock in trickling:
                with contextlib.suppress(OSError):
                    sock.sendall(header[offset : offset + 4])
            offset += 4
            time.sleep(0.05)
        open_ = 0
        for sock in trickling + quiet:
            sock.settimeout(5)
            try:
                open_ += sock.recv(1024) != b""
            except ConnectionResetError:
                pass
            except TimeoutError:
                open_ += 1
        return open_
    finally:
        for sock in trickling + quiet:
            sock.close()


def start_node(data: str, port: int, *flags: str) -> tuple[subprocess.Popen[str], str]:
    """Start a node process; return it and its URL."""
    argv = [sys.executable, "-m", "dynamiq", "serve", "--storage-path", data]
    argv += ["--core-httpport", str(port), "--core-loglevelstring", "warn", *flags]
    node = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert node.stdout is not None
    return node, node.stdout.readline().split("serving ")[1].split(";")[0]


def _create(url: str, queue: str, **settings: Any) -> None:
    async def create() -> None:
        async with (
            aiohttp.ClientSession() as session,
            session.put(f"{url}/v2/queues/{queue}", json=settings) as response,
        ):
            await response.read()

    asyncio.run(create())


def bursts(url: str, pid: int, count: int) -> None:
    """Connect 2,000 waiting receives at once ``count`` times, a probe every 25 ms
    meanwhile; print each burst's worst probe, how many of them came in 100 ms, and
    the node's CPU per waiting receive over them all."""
    print("burst   worst probe ms   probes   statuses")
    worst: list[float] = []
    cpu = cpu_seconds(pid)
    for number in range(1, count + 1):
        with Prober(url, pid, every=0.025) as prober:
            got = asyncio.run(waiting_receives(url, "idle", 2000, 1))
        worst.append(max(prober.seconds, default=PROBE_TIMEOUT) * 1000)
        failed = f" ({len(prober.failures)} probes failed)" if prober.failures else ""
        print(f"{number:5} {worst[-1]:16.1f} {len(prober.seconds):8}   {dict(got)}{failed}")
    each = (cpu_seconds(pid) - cpu) / (2000 * count) * 1e6
    within = sum(ms <= 100 for ms in worst)
    middle = statistics.median(worst)
    print(f"{within} of {count} bursts' worst probe within 100 ms; median {middle:.1f} ms")
    print(f"node CPU per waiting receive: {each:.0f} µs")


def main() -> None:
    """Run the three floods (or ``--bursts``) and print what the probes and the node showed."""
    ap = options(__doc__, port=18183)
    ap.add_argument("--workers", default="auto", help="the node's core.workers (default auto)")
    ap.add_argument("--bursts", type=int, default=0, help="run only the arrival burst, N times")
    ap.add_argument("--front", default="on", help="the node's core.front (default on)")
    args = ap.parse_args()
    node_flags = ("--core-workers", args.workers, "--core-front", args.front)
    if args.bursts:
        with tempfile.TemporaryDirectory() as tmp:
            node, url = start_node(tmp, args.port, *node_flags)
            try:
                _create(url, "idle")
                bursts(url, node.pid, args.bursts)
            finally:
                node.terminate()
                node.wait(30)
        return
    print(
        "flood                      probe ms: p50      p99      max   statuses   "
        "node CPU µs each   peak RSS MB (anonymous)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        node, url = start_node(tmp, args.port, "--limits-idletimeout", "2", *node_flags)
        try:
            _create(url, "idle")
            _create(url, "big", max_message_bytes=MIB - 1024)
            # What each flood is called, how many requests (or connections) it makes
            # (None: as many as it got answers to), and the flood.
            floods: list[tuple[str, int | None, Callable[[], Mapping[Any, int]]]] = [
                (
                    "2,000 waiting receives",
                    2000,
                    lambda: asyncio.run(waiting_receives(url, "idle", 2000, 5)),
                ),
                (
                    "400 slow or silent connections",
                    400,
                    lambda: {"left open": slow_headers(url, 300, 100, 4)},
                ),
                (
                    "8 clients x 1 MiB publishes",
                    None,
                    lambda: asyncio.run(publish_flood(url, "big", 8, 10)),
                ),
            ]
            for name, count, flood in floods:
                used = cpu_seconds(node.pid)
                with Prober(url, node.pid) as prober:
                    got = flood()
                each = (cpu_seconds(node.pid) - used) / (count or sum(got.values())) * 1e6
                failed = f" ({len(prober.failures)} probes failed)" if prober.failures else ""
                print(
                    f"{name:<32} {prober.summary()}   {dict(got)!s:<10} {each:8.0f}   "
                    f"{memory_mib(node.pid):8.0f} ({prober.anonymous_mib:.0f}){failed}"
                )
        finally:
            node.terminate()
            node.wait(30)


if __name__ == "__main__":
    main()
