"""Shared fixtures: a store in a temporary directory, a real app on it, real node processes."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from aiohttp.test_utils import TestClient
from blockbuster import blockbuster_ctx

from dynamiq.api.front.connection import FRONT
from dynamiq.config.sources import load_settings
from dynamiq.core.clock import FakeClock
from dynamiq.storage.lmdb import LmdbBackend
from dynamiq.testing.server import node_client
from tests.servers import flush_redis, redis_cluster, redis_server, refused
from tests.waiting import soon

# Node processes the tests start are one process each unless a test says otherwise
# (the default, one worker per core, is what tests/test_workers.py and the chaos
# command with --workers exercise).
os.environ.setdefault("DYNAMIQ_CORE_WORKERS", "1")

# Blocking calls that are allowed: in libraries, once per connection, or at start-up.
LIBRARY_BLOCKING = [
    # redis-py reads its own version from the package metadata for each new connection.
    *(
        (function, "redis/utils.py", "get_lib_version")
        for function in ("os.stat", "os.listdir", "os.scandir", "io.TextIOWrapper.read")
    ),
    # Opening the embedded store is a start-up step (tests open stores in their body).
    *(
        (function, "dynamiq/storage/lmdb/backend.py", "__init__")
        for function in ("os.mkdir", "os.stat")
    ),
    # The gossip library joins its thread pool when it stops: once, at a node's shutdown.
    ("threading.Lock.acquire", "concurrent/futures/thread.py", "shutdown"),
    # A StatsD datagram to a local agent: UDP sends do not wait for the receiver.
    ("socket.socket.sendto", "statsd/client/udp.py", "_send"),
    # The lease journal appends a few hundred bytes to the page cache, no fsync
    # (microseconds), and makes and deletes a small file every 2 s.
    *(
        (function, "dynamiq/core/custody/journal.py", name)
        for function, name in (
            ("os.mkdir", "_append"),
            ("os.stat", "_append"),
            ("os.write", "_append"),
            ("os.unlink", "_unlink"),
        )
    ),
]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """End with one line naming the servers whose tests skipped, and how to install them."""
    wanted: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        if found := re.search(r"Skipped: (\S+) is not installed", reason):
            wanted[found[1]] = wanted.get(found[1], 0) + 1
    if wanted:
        told = ", ".join(f"{name} ({count} tests)" for name, count in sorted(wanted.items()))
        terminalreporter.write_line(
            f"skipped for want of {told}: install them with `sudo bash scripts/servers` "
            "(Debian, Ubuntu) and run make test again"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Fail an async test when Dynamiq's code blocks the event loop (file, socket, sleep).

    Only the test's own run is watched: a node opening its store at start-up
    (in the fixtures) may block once.
    """
    function = getattr(item, "function", None)
    if not inspect.iscoroutinefunction(function):
        return (yield)
    with blockbuster_ctx(["dynamiq"]) as detector:
        for function, path, name in LIBRARY_BLOCKING:
            detector.functions[function].can_block_in(path, name)
        return (yield)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[LmdbBackend]:
    backend = LmdbBackend(tmp_path / "store", map_size=1 << 30)
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One redis-server for the session (each test flushes it first)."""
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One 6-node Redis Cluster for the session (each test flushes it first)."""
    with redis_cluster(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster.url


@pytest.fixture(params=["lmdb", "redis-cluster"])
def process_store(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """The flags of the store a node process runs on: LMDB, or a flushed Redis Cluster."""
    if request.param == "lmdb":
        return ()
    url: str = request.getfixturevalue("redis_cluster_url")
    asyncio.run(flush_redis(url))
    return ("--storage-backend", "redis", "--storage-url", url)


async def node_client_with(
    flags: dict[str, str], clock: FakeClock | None = None
) -> TestClient[Any, Any]:
    """Start a node app with the tests' usual limits and ``flags`` (on ``clock``)."""
    settings = load_settings(
        env={},
        flags={
            "core.httpport": "0",
            "limits.maxbatch": "100",
            "limits.maxbodybytes": "65536",
            "limits.maxwaitseconds": "5",
            **flags,
        },
    )
    return await node_client(settings, clock)


async def under_way(http: TestClient[Any, Any], what: str = "a request under way") -> None:
    """Wait until the node of ``http`` (``node_client_with``'s) has a request under way
    in its front end: read, and not answered (a long poll waiting, say)."""
    app = http.app
    assert app is not None
    front = app[FRONT]
    await soon(lambda: any(c.task for c in front.connections), what=what)


async def store_flags(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The flags of the store ``request.param`` names (lmdb, redis, redis-cluster)."""
    if request.param == "lmdb":
        return {"storage.path": str(tmp_path / "data")}
    url = request.getfixturevalue(request.param.replace("-", "_") + "_url")
    await flush_redis(url)
    # The node's own files (its lease journal) stay in the test's directory.
    return {"storage.backend": "redis", "storage.url": url, "storage.path": str(tmp_path)}


@pytest.fixture(params=["lmdb", "redis", "redis-cluster"])
async def http(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[TestClient[Any, Any]]:
    """A real node application on a real store, behind a real HTTP server."""
    async with await node_client_with(await store_flags(request, tmp_path)) as client:
        yield client


ADMIN_KEY = "the-administrators-test-key-0123456789abcdef"


@pytest.fixture(params=["lmdb", "redis"])
async def keyed(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[TestClient[Any, Any]]:
    """A node that needs keys, whose administrator's key is ``ADMIN_KEY``."""
    flags = {"auth.enabled": "true", "auth.adminkey": ADMIN_KEY}
    async with await node_client_with({**await store_flags(request, tmp_path), **flags}) as client:
        yield client


@pytest.fixture
async def lmdb_http(tmp_path: Path) -> AsyncIterator[TestClient[Any, Any]]:
    """A real node application on the embedded store only."""
    async with await node_client_with({"storage.path": str(tmp_path / "data")}) as client:
        yield client


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


class NodeFactory(Protocol):
    """Makes a node process with extra flags, on a data directory of its own or ``data``."""

    def __call__(self, *extra: str, data: Path | None = None) -> NodeProcess: ...


class NodeProcess:
    """A ``dynamiq serve`` child process on an OS-chosen port."""

    def __init__(self, data: Path, *extra: str, checkout: Path | None = None) -> None:
        self.data = data
        self.extra = extra
        self.checkout = checkout  # run another checkout's package (same interpreter)
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.log: list[str] = []

    def start(self) -> NodeProcess:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dynamiq",
                "serve",
                "--core-httpport",
                "0",
                "--storage-path",
                str(self.data),
                "--core-loglevelstring",
                "warn",
                *self.extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=self.checkout,
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if re.search("serving https?://", line):
                self.url = line.split("serving ")[1].split(";")[0]
                # Keep reading so a chatty node never blocks on a full pipe.
                threading.Thread(target=self._drain, daemon=True).start()
                return self
            self.log.append(line)
        said = "".join(self.log[-5:])
        raise RuntimeError(f"node did not start: exit {self.proc.wait(10)}: {said}")

    def _drain(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with contextlib.suppress(ValueError, OSError):
            for line in self.proc.stdout:
                self.log.append(line)

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def node_factory(tmp_path: Path) -> Iterator[NodeFactory]:
    """Make node processes (not started) that are stopped after the test."""
    started: list[NodeProcess] = []

    def make(*extra: str, data: Path | None = None) -> NodeProcess:
        node = NodeProcess(data or tmp_path / "node-data", *extra)
        started.append(node)
        return node

    try:
        yield make
    finally:
        for node in started:
            node.stop()


@pytest.fixture
def down_url() -> Iterator[str]:
    """A node URL nobody answers at (connections are refused) for the whole test."""
    with refused() as (nobody,):
        yield f"http://{nobody}"


@pytest.fixture
def down_urls() -> Iterator[list[str]]:
    """Two node URLs nobody answers at, for the whole test."""
    with refused(2) as nobody:
        yield [f"http://{address}" for address in nobody]


@pytest.fixture
def no_poll_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A waiting receive looks at its queue again only when woken (a publish, a lease
    ending): never after ``EMPTY_HINT_SECONDS`` on its own."""
    monkeypatch.setattr("dynamiq.core.queues.EMPTY_HINT_SECONDS", 3600.0)
