"""The storage contract: every StorageBackend adapter must pass this suite.

Riak runs only where ``DYNAMIQ_RIAK_URL`` names a Riak KV 3.2 node with the
``messages`` and ``maps`` bucket types active (``setup.sh --riak URL``) and a
2i-capable backend (leveled, leveldb or memory); each test uses its own
namespace of buckets.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dynamiq.keyspace import ID_MAX
from dynamiq.storage.base import StorageBackend
from dynamiq.storage.lmdb import LmdbBackend
from tests.servers import flush_redis


@pytest.fixture(params=["lmdb", "redis", "redis-cluster", "riak"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StorageBackend]:
    store: StorageBackend
    if request.param == "lmdb":
        store = LmdbBackend(tmp_path / "lmdb", map_size=1 << 28)
    elif request.param == "riak":
        from dynamiq.storage.riak import RiakBackend

        url = os.environ.get("DYNAMIQ_RIAK_URL")
        if not url:
            pytest.skip("set DYNAMIQ_RIAK_URL to a Riak KV node to run the Riak contract")
        store = RiakBackend(url.split(","), namespace=f"t{secrets.token_hex(4)}-")
    else:
        from dynamiq.storage.redis import RedisBackend

        url = request.getfixturevalue(request.param.replace("-", "_") + "_url")
        await flush_redis(url)
        store = RedisBackend(url)
    try:
        yield store
    finally:
        await store.close()


async def test_insert_never_overwrites(backend: StorageBackend) -> None:
    assert await backend.insert([("b", 1, b"one"), ("b", 2, b"two")]) == [True, True]
    assert await backend.insert([("b", 1, b"again"), ("b", 3, b"three")]) == [False, True]
    assert await backend.get("b", [1, 2, 3, 4]) == [b"one", b"two", b"three", None]


async def test_buckets_are_separate(backend: StorageBackend) -> None:
    await backend.insert([("a", 7, b"a7"), ("ab", 7, b"ab7")])
    assert await backend.get("a", [7]) == [b"a7"]
    assert await backend.scan("a", [(0, ID_MAX)], 10) == [[7]]
    assert await backend.count("a") == 1 and await backend.count("ab") == 1


async def test_scan_returns_ascending_keys_per_inclusive_range(backend: StorageBackend) -> None:
    keys = [0, 5, 9, 10, 11, 1 << 62, ID_MAX]
    await backend.insert([("s", k, b"") for k in keys])
    found = await backend.scan("s", [(0, 10), (10, 10), (11, 1 << 62), (ID_MAX, ID_MAX)], 100)
    assert found == [[0, 5, 9, 10], [10], [11, 1 << 62], [ID_MAX]]
    assert await backend.scan("s", [(0, ID_MAX), (6, ID_MAX)], [2, 3]) == [[0, 5], [9, 10, 11]]
    assert await backend.scan("s", [(1, 4)], 10) == [[]]


async def test_delete_reports_what_existed_and_counts_follow(backend: StorageBackend) -> None:
    await backend.insert([("d", k, b"v") for k in range(10)])
    assert await backend.delete("d", [1, 2, 2, 99]) == [True, True, False, False]
    assert await backend.count("d") == 8
    assert await backend.get("d", [1, 3]) == [None, b"v"]


async def test_drop_empties_a_bucket_only(backend: StorageBackend) -> None:
    await backend.insert([("x", k, b"v") for k in range(25_000)] + [("y", 1, b"keep")])
    await backend.drop("x")
    assert await backend.count("x") == 0
    assert await backend.scan("x", [(0, ID_MAX)], 5) == [[]]
    assert await backend.get("y", [1]) == [b"keep"]


async def test_concurrent_inserts_all_land(backend: StorageBackend) -> None:
    results = await asyncio.gather(*(backend.insert([("c", k, b"%d" % k)]) for k in range(500)))
    assert all(r == [True] for r in results)
    assert await backend.count("c") == 500


async def test_meta_create_put_scan_delete(backend: StorageBackend) -> None:
    assert await backend.meta_create("q/a", b"1")
    assert not await backend.meta_create("q/a", b"2")
    await backend.meta_put({"q/b": b"3", "t/x": b""})
    assert await backend.meta_get("q/a") == b"1"
    assert await backend.meta_get("nope") is None
    assert await backend.meta_scan("q/") == {"q/a": b"1", "q/b": b"3"}
    assert await backend.meta_delete(["q/a", "q/zz"]) == 1
    assert await backend.meta_scan("") == {"q/b": b"3", "t/x": b""}


async def test_close_is_idempotent(backend: StorageBackend) -> None:
    await backend.close()
    await backend.close()
