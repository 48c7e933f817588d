"""What only the embedded store promises: group commit, a growing map, shared directories."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import time
from pathlib import Path

import lmdb
import pytest

from dynamiq.keyspace import ID_MAX
from dynamiq.storage.lmdb import LmdbBackend


@pytest.fixture(params=["thread", "process"])
def writer(request: pytest.FixtureRequest) -> str:
    """Who commits: the store's own thread, or a writer process for the directory."""
    param: str = request.param
    return param


async def test_concurrent_writes_share_commits(tmp_path: Path, writer: str) -> None:
    store = LmdbBackend(tmp_path, map_size=1 << 28, writer=writer)
    try:
        await asyncio.gather(*(store.insert([("g", k, b"x" * 100)]) for k in range(2000)))
        assert await store.count("g") == 2000
        assert store.commits < 200  # 2,000 acknowledged writes, far fewer fsyncs
    finally:
        await store.close()


async def test_a_full_map_grows_instead_of_failing(tmp_path: Path, writer: str) -> None:
    store = LmdbBackend(tmp_path, map_size=1 << 20, writer=writer)
    try:
        for chunk in range(8):
            rows = [("m", chunk * 1000 + k, os.urandom(1000)) for k in range(1000)]
            assert all(await store.insert(rows))
        assert await store.count("m") == 8000
    finally:
        await store.close()


async def test_publish_delete_churn_does_not_grow_the_file(tmp_path: Path, writer: str) -> None:
    store = LmdbBackend(tmp_path, map_size=1 << 30, writer=writer)
    data = tmp_path / "data.mdb"
    try:
        sizes = []
        for round_ in range(30):
            keys = [round_ * 1000 + k for k in range(1000)]
            await store.insert([("churn", k, b"y" * 1024) for k in keys])
            assert all(await store.delete("churn", keys))
            sizes.append(data.stat().st_size)
        # Freed pages are reused: after warm-up the file stops growing.
        assert sizes[-1] <= sizes[9] * 1.1, sizes
    finally:
        await store.close()


def _writer(path: str, base: int, n: int) -> None:
    async def main() -> None:
        store = LmdbBackend(path, map_size=1 << 28)
        try:
            for k in range(n):
                assert await store.insert([("shared", base + k, b"p%d" % base)]) == [True]
        finally:
            await store.close()

    asyncio.run(main())


async def test_processes_share_one_directory(tmp_path: Path) -> None:
    # Each process opens the environment itself (never across fork).
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), i * 10_000, 300)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        await asyncio.to_thread(p.join, 60)
        assert p.exitcode == 0
    store = LmdbBackend(tmp_path, map_size=1 << 28)
    try:
        assert await store.count("shared") == 900
        (keys,) = await store.scan("shared", [(0, ID_MAX)], 1000)
        assert len(keys) == 900
    finally:
        await store.close()


def _grower(path: str) -> None:
    async def main() -> None:
        store = LmdbBackend(path, map_size=1 << 20)
        try:
            for chunk in range(6):
                rows = [("big", chunk * 1000 + k, os.urandom(1000)) for k in range(1000)]
                assert all(await store.insert(rows))
        finally:
            await store.close()

    asyncio.run(main())


async def test_a_map_grown_by_another_process_is_adopted(tmp_path: Path) -> None:
    store = LmdbBackend(tmp_path, map_size=1 << 20)
    try:
        await store.insert([("mine", 1, b"before")])
        proc = mp.get_context("spawn").Process(target=_grower, args=(str(tmp_path),))
        proc.start()
        await asyncio.to_thread(proc.join, 60)
        assert proc.exitcode == 0
        assert await store.insert([("mine", 2, b"after")]) == [True]
        assert await store.count("big") == 6000
        assert await store.get("mine", [1, 2]) == [b"before", b"after"]
    finally:
        await store.close()


def _rss_file_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no RssFile in /proc/self/status")


async def test_maintain_gives_back_the_pages_reads_mapped(tmp_path: Path) -> None:
    store = LmdbBackend(tmp_path, map_size=1 << 30)
    try:
        keys = list(range(40_000))
        for start in range(0, len(keys), 4000):
            await store.insert([("r", k, b"z" * 1024) for k in keys[start : start + 4000]])
        before = _rss_file_mb()
        assert len([v for v in await store.get("r", keys) if v]) == len(keys)
        touched = _rss_file_mb()
        assert touched - before > 20  # reading 40 MB mapped its pages
        await store.maintain()
        assert _rss_file_mb() < touched - 20
        assert (await store.get("r", [123]))[0] == b"z" * 1024  # still readable
    finally:
        await store.close()


async def test_maintain_forgets_expired_claims(tmp_path: Path, writer: str) -> None:
    store = LmdbBackend(tmp_path / "db", map_size=1 << 24, writer=writer)
    try:
        now = int(time.time() * 1000)
        # Claims made at a past "now": live for that clock, expired for the real one.
        past = now - 3_600_000
        await store.insert_claimed(
            [("q", i, b"m", f"q/{i}", b"1", past + 1000, 0) for i in range(3)], past
        )
        await store.insert_claimed([("q", 9, b"m", "q/live", b"2", now + 60_000, 0)], now)
        assert await store.insert_claimed([("q", 10, b"x", "q/0", b"x", past + 1000, 0)], past) == [
            b"1"
        ]
        await store.maintain()
        # Gone from the store: the same past clock now finds the keys free.
        again = [("q", 20 + i, b"x", f"q/{i}", b"x", past + 1000, 0) for i in range(3)]
        assert await store.insert_claimed(again, past) == [True, True, True]
        live = [("q", 30, b"y", "q/live", b"y", now + 60_000, 0)]
        assert await store.insert_claimed(live, now) == [b"2"]
    finally:
        await store.close()


async def test_a_store_made_before_the_total_was_kept_is_counted_when_opened(
    tmp_path: Path,
) -> None:
    store = LmdbBackend(tmp_path, map_size=1 << 28)
    await store.insert([(b, k, b"v") for b in ("x", "y") for k in range(10)])
    await store.close()
    env = lmdb.open(str(tmp_path), max_dbs=8)  # as an older version left it: no total
    with env.begin(write=True) as txn:
        assert txn.delete(b"\x00", db=env.open_db(b"counts", txn=txn))
    env.close()
    store = LmdbBackend(tmp_path, map_size=1 << 28)
    try:
        assert await store.total() == 20
        await store.delete("x", [0, 1])
        assert await store.total() == 18
    finally:
        await store.close()
