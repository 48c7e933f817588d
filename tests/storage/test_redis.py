"""What only the Redis store promises: WAIT for replicas on the writing connection."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis.asyncio as aioredis

import dynamiq.storage.redis as redis_store
from dynamiq.errors import BackendUnavailable
from dynamiq.storage.redis import RedisBackend
from tests.servers import redis_server


async def _linked(replica_url: str) -> None:
    client = aioredis.Redis.from_url(replica_url)
    try:
        for _ in range(200):
            info = await client.info("replication")
            if info.get("master_link_status") == "up":
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the replica never linked")
    finally:
        await client.aclose()


@pytest.mark.slow
async def test_writes_wait_for_the_replicas_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_store, "WAIT_MS", 300)
    with redis_server(tmp_path / "primary") as url:
        primary = url.split("//")[1].split("/")[0]
        with redis_server(tmp_path / "replica", replica_of=primary) as replica_url:
            await _linked(replica_url)
            one = RedisBackend(url, wait_replicas=1)
            two = RedisBackend(url, wait_replicas=2)
            try:
                # One replica exists: a write waiting for it succeeds, and is on it
                assert await one.insert([("w", 1, b"a")]) == [True]
                replica = RedisBackend(replica_url)
                assert await replica.get("w", [1]) == [b"a"]
                await replica.close()
                # Two are asked for: the write is not acknowledged
                with pytest.raises(BackendUnavailable, match="only 1 replicas"):
                    await two.insert([("w", 2, b"b")])
                with pytest.raises(BackendUnavailable):
                    await two.meta_put({"k": b"v"})
            finally:
                await one.close()
                await two.close()
