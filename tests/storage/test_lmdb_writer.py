"""The embedded store's writer process (``storage.writer = process``): one for every
process that opens the directory, a group commit for all of them, and nothing
acknowledged lost when it is killed."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.procs import state
from dynamiq.errors import BackendUnavailable
from dynamiq.keyspace import ID_MAX
from dynamiq.storage.lmdb import LmdbBackend
from dynamiq.storage.lmdb.server import LOCK_FILE
from dynamiq.storage.lmdb.wire import address, frame, is_file
from tests.waiting import soon


def _writer_pid(path: Path) -> int:
    return int((path / LOCK_FILE).read_text())


def _alive(pid: int) -> bool:
    return state(pid) not in ("Z", "gone")


def _writers(path: Path) -> list[int]:
    """The writer processes serving ``path``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"dynamiq.storage.lmdb.server" in args and str(path).encode() in args:
            found.append(int(cmdline.parent.name))
    return [pid for pid in found if _alive(pid)]


async def _gone(pid: int) -> None:
    await soon(lambda: not _alive(pid), 30.0, 0.05, what=f"process {pid} gone")


def _worker(path: str, base: int, n: int) -> None:
    """A worker of the node: writes through the directory's writer process."""

    async def main() -> None:
        store = LmdbBackend(path, map_size=1 << 28, writer="process")
        try:
            writes = [store.insert([("g", base + k, b"x" * 100)]) for k in range(n)]
            assert await asyncio.gather(*writes) == [[True]] * n
        finally:
            await store.close()

    asyncio.run(main())


async def test_processes_share_one_writer_and_its_commits(tmp_path: Path) -> None:
    store = LmdbBackend(tmp_path, map_size=1 << 28, writer="process")
    try:
        await store.insert([("warm", 1, b"up")])
        writer, commits = _writer_pid(tmp_path), store.commits
        ctx = mp.get_context("spawn")
        workers = [
            ctx.Process(target=_worker, args=(str(tmp_path), i * 10_000, 1000)) for i in (1, 2)
        ]
        for w in workers:
            w.start()
        await asyncio.gather(*(store.insert([("g", k, b"x" * 100)]) for k in range(1000)))
        for w in workers:
            await asyncio.to_thread(w.join, 60)
            assert w.exitcode == 0
        assert await store.count("g") == 3000
        await store.insert([("warm", 2, b"again")])  # the writer's count, as it is now
        assert store.commits - commits < 1500  # 3,000 acknowledged writes, far fewer fsyncs
        assert _writers(tmp_path) == [writer]  # one writer served the three
    finally:
        await store.close()


async def test_a_killed_writer_loses_nothing_acknowledged(tmp_path: Path) -> None:
    store = LmdbBackend(tmp_path, map_size=1 << 28, writer="process")
    try:
        await store.insert([("k", 0, b"first")])
        first = _writer_pid(tmp_path)
        acknowledged: list[int] = []
        refused: list[BackendUnavailable] = []

        async def publish(k: int) -> None:
            try:
                assert await store.insert([("k", k, b"v%d" % k)]) == [True]
            except BackendUnavailable as exc:
                refused.append(exc)
            else:
                acknowledged.append(k)

        async def kill_when_busy() -> None:
            while len(acknowledged) < 200:  # noqa: ASYNC110 - the load's own progress
                await asyncio.sleep(0.001)
            os.kill(first, signal.SIGKILL)

        async def load() -> None:
            for wave in range(20):
                await asyncio.gather(*(publish(wave * 100 + k) for k in range(1, 101)))

        await asyncio.gather(load(), kill_when_busy())
        await _gone(first)
        assert all(exc.retry_after >= 1 for exc in refused)  # a 503 that says when to retry
        (keys,) = await store.scan("k", [(0, ID_MAX)], 10_000)
        assert set(acknowledged) <= set(keys)
        # The next write starts a writer again.
        assert await store.insert([("k", 5000, b"after")]) == [True]
        assert _writer_pid(tmp_path) != first
        assert (await store.get("k", [0, 5000])) == [b"first", b"after"]
    finally:
        await store.close()


async def test_the_writer_leaves_when_nobody_is_connected(tmp_path: Path) -> None:
    store = LmdbBackend(tmp_path, map_size=1 << 28, writer="process")
    await store.insert([("q", 1, b"m")])
    pid = _writer_pid(tmp_path)
    await store.close()
    await _gone(pid)
    reopened = LmdbBackend(tmp_path, map_size=1 << 28)
    try:
        assert await reopened.get("q", [1]) == [b"m"]
    finally:
        await reopened.close()


async def test_a_writer_of_a_directory_made_again_leaves_the_new_writers_socket(
    tmp_path: Path,
) -> None:
    """A directory deleted and made again under a writer still running (as when a
    test's directory is removed and its name used again): its writer, leaving,
    must not remove the socket of the directory's new writer."""
    path = tmp_path / "store"
    first = LmdbBackend(path, map_size=1 << 28, writer="process")
    await first.insert([("q", 1, b"old")])
    old = _writer_pid(path)
    await first.close()  # the old writer stays a few seconds, alone
    await asyncio.to_thread(shutil.rmtree, path)
    second = LmdbBackend(path, map_size=1 << 28, writer="process")
    try:
        await second.insert([("q", 2, b"new")])
        new = _writer_pid(path)
        assert new != old
        await _gone(old)
        assert os.path.exists(address(path))  # noqa: ASYNC240 - one stat
        # A process that opens the directory now still reaches its writer.
        third = mp.get_context("spawn").Process(target=_worker, args=(str(path), 100, 10))
        third.start()
        await asyncio.to_thread(third.join, 60)
        assert third.exitcode == 0
        assert await second.count("g") == 10
        assert _writer_pid(path) == new
    finally:
        await second.close()


_STRANGER = """
import os, socket, sys
os.setgid(65534)
os.setuid(65534)
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(10)
try:
    sock.connect(bytes.fromhex(sys.argv[1]))
except PermissionError:
    print("not let in")
    sys.exit()
try:
    sock.sendall(bytes.fromhex(sys.argv[2]))
    print("closed" if sock.recv(100) == b"" else "answered")
except (ConnectionResetError, BrokenPipeError):
    print("closed")
"""


@pytest.mark.parametrize(
    ("depth", "kept_out"),
    [
        (0, "not let in"),  # the socket's file is its user's alone
        (120, "closed"),  # a path too long for a file: abstract, the peer's credentials checked
    ],
)
async def test_another_user_cannot_write(tmp_path: Path, depth: int, kept_out: str) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root, to be another user for a moment")
    data = tmp_path / ("d" * depth) if depth else tmp_path
    data.mkdir(exist_ok=True)
    assert is_file(address(data)) == (depth == 0)
    store = LmdbBackend(data, map_size=1 << 28, writer="process")
    try:
        await store.insert([("q", 1, b"mine")])
        key = b"\x01q" + (2).to_bytes(8, "big")
        request = frame((1, "insert", ([(key, b"theirs")], {b"\x01q": 1}), 0))
        argv = [sys.executable, "-c", _STRANGER, address(data).hex(), request.hex()]
        said = await asyncio.to_thread(subprocess.run, argv, capture_output=True, timeout=30)
        assert said.stdout.decode().strip() == kept_out, said.stderr
        assert await store.get("q", [1, 2]) == [b"mine", None]
        assert await store.insert([("q", 3, b"still")]) == [True]
    finally:
        await store.close()
