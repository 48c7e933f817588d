"""What only the Redis store promises: WAIT for replicas on the writing connection; where
its keys live, and when a census is one script."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

import dynamiq.storage.redis.backend as redis_store
from dynamiq.errors import BackendUnavailable
from dynamiq.storage.redis import RedisBackend
from dynamiq.storage.redis.census import SHARDS, cut_of
from dynamiq.storage.redis.layout import SHARD_BITS, shard_keys, shard_slots
from tests.servers import flush_redis, redis_server
from tests.waiting import eventually


async def _linked(primary_url: str, replica_url: str) -> None:
    """Wait until the replica is linked and the primary counts it online (what WAIT counts)."""
    primary = aioredis.Redis.from_url(primary_url)
    replica = aioredis.Redis.from_url(replica_url)

    async def linked() -> bool:  # replication has no event to wait on
        up = (await replica.info("replication")).get("master_link_status") == "up"
        seen = (await primary.info("replication")).get("slave0", {})
        return up and isinstance(seen, dict) and seen.get("state") == "online"

    try:
        await eventually(linked, 30.0, 0.05, what="the replica linked")
    finally:
        await primary.aclose()
        await replica.aclose()


@pytest.mark.slow
async def test_writes_wait_for_the_replicas_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with redis_server(tmp_path / "primary") as url:
        primary = url.split("//")[1].split("/")[0]
        with redis_server(tmp_path / "replica", replica_of=primary) as replica_url:
            await _linked(url, replica_url)
            one = RedisBackend(url, wait_replicas=1)
            two = RedisBackend(url, wait_replicas=2)
            try:
                # One replica exists: a write waiting for it succeeds, and is on it
                assert await one.insert([("w", 1, b"a")]) == [True]
                replica = RedisBackend(replica_url)
                assert await replica.get("w", [1]) == [b"a"]
                await replica.close()
                # Two are asked for: the write is not acknowledged (no need to wait long)
                monkeypatch.setattr(redis_store, "WAIT_MS", 300)
                with pytest.raises(BackendUnavailable, match="only 1 replicas"):
                    await two.insert([("w", 2, b"b")])
                with pytest.raises(BackendUnavailable):
                    await two.meta_put({"k": b"v"})
            finally:
                await one.close()
                await two.close()


async def test_a_claim_is_a_key_the_server_expires_after_its_window(redis_url: str) -> None:
    await flush_redis(redis_url)
    store = RedisBackend(redis_url)
    raw = aioredis.Redis.from_url(redis_url)
    key = (3 << 55) | 1  # stripe 3: the claim lives beside it, in shard 3
    name = "dq:{q:3}:c:q/a"
    try:
        now = int(time.time() * 1000)
        assert await store.insert_claimed(
            [("q", key, b"m", "q/a", b"1", now + 60_000, 3)], now
        ) == [True]
        ttl = await raw.pttl(name)
        assert 59_000 < ttl <= 60_000
        # A claim made again after its window (by the caller's clock) restarts the timer.
        again = [("q", key + 1, b"m", "q/a", b"2", now + 70_000, 3)]
        assert await store.insert_claimed(again, now + 60_000) == [True]
        assert 9_000 < await raw.pttl(name) <= 10_000
    finally:
        await raw.aclose()
        await store.close()


@pytest.mark.parametrize("second_in_home", [False, True])
async def test_a_copy_claimed_across_shards_by_a_publisher_that_died_is_shown_not_lost(
    redis_url: str, second_in_home: bool
) -> None:
    """A publisher died after claiming and before showing its object (what it leaves is
    written here by hand): the next insert of that claim, across shards or beside
    its home, answers the claim's value and shows the object for receives to meet."""
    await flush_redis(redis_url)
    store = RedisBackend(redis_url)
    raw = aioredis.Redis.from_url(redis_url)
    first = (9 << 55) | 1  # in shard 9; the claim's home is shard 5
    now = int(time.time() * 1000)
    try:
        await raw.hset("dq:{q:9}:h", f"{first:016x}", b"first")  # hidden: in no sorted set
        record = b"%013d" % (now + 60_000) + str(first).encode()
        await raw.set("dq:{q:5}:c:q/d", record, px=60_000)
        await raw.set("dq:{q:5}:n:q/d", f"{first:016x}", px=60_000)
        assert await store.scan("q", [(9 << 55, (10 << 55) - 1)], 10) == [[]]
        assert await store.count("q") == 0  # the depth counts what receives can meet
        second = ((5 if second_in_home else 7) << 55) | 1
        again = [("q", second, b"second", "q/d", str(second).encode(), now + 60_000, 5)]
        assert await store.insert_claimed(again, now) == [str(first).encode()]
        assert await store.scan("q", [(9 << 55, (10 << 55) - 1)], 10) == [[first]]
        assert await store.get("q", [first, second]) == [b"first", None]
        assert await store.count("q") == 1
    finally:
        await raw.aclose()
        await store.close()


async def test_a_server_that_forgot_the_scripts_learns_them_and_runs_the_writes(
    redis_url: str,
) -> None:
    # Scripts go by digest alone; a server flushed or restarted knows none of them
    await flush_redis(redis_url)
    store = RedisBackend(redis_url)
    server = aioredis.Redis.from_url(redis_url)
    try:
        assert await store.insert([("b", 1, b"one")]) == [True]
        await server.script_flush()
        assert await store.insert([("b", 2, b"two"), ("b", 1, b"again")]) == [True, False]
        assert await store.get("b", [1, 2]) == [b"one", b"two"]
        await server.script_flush()
        assert (
            await store.census("b", [(s << 55, s << 55, s << 55 | 5) for s in range(256)], 9)
        ).objects == 2
        assert await store.delete("b", [1]) == [True]
        assert await store.count("b") == 1
    finally:
        await server.aclose()
        await store.close()


async def test_a_store_holding_messages_from_before_the_total_was_kept_has_none(
    redis_url: str,
) -> None:
    await flush_redis(redis_url)
    raw = aioredis.Redis.from_url(redis_url)
    first = RedisBackend(redis_url)
    try:
        await first.insert([("q", 1, b"m"), ("q", 2, b"m")])
        assert await first.total() == 2  # an empty store, marked at its first message
        await raw.delete("dq:totals")  # as an earlier release left a store: no mark
        later = RedisBackend(redis_url)
        assert await later.total() is None  # its counters did not count from empty
        await later.insert([("q", 3, b"m")])
        assert await later.total() is None and not await raw.exists("dq:totals")
        await later.close()
        await first.drop("q")  # emptied: the next process to look marks it again
        again = RedisBackend(redis_url)
        assert await again.total() == 0
        await again.insert([("r", 1, b"m")])
        assert await again.total() == 1
        await again.close()
    finally:
        await raw.aclose()
        await first.close()


@pytest.mark.parametrize("bucket", ["q", "tenant-0000042", "a1b2c3d4e5f60718", "é", "x{y}", "a}b{"])
def test_the_slots_of_a_buckets_shards_are_those_redis_gives_their_keys(bucket: str) -> None:
    # Worked out from one CRC of the bucket, with a brace the way Redis reads the key
    assert shard_slots(bucket) == [
        key_slot(shard_keys(bucket, shard)[1].encode()) for shard in range(1 << SHARD_BITS)
    ]


def test_a_census_is_one_script_only_for_the_shards_cut_at_one_point() -> None:
    def spans(cut: int) -> list[tuple[int, int, int]]:
        return [(lo, lo | cut, hi) for lo, hi in SHARDS]

    assert cut_of(spans(0)) == 0 and cut_of(spans((1 << 55) - 1)) == (1 << 55) - 1
    assert cut_of(spans(12345)) == 12345
    uneven = spans(7)
    uneven[9] = (uneven[9][0], uneven[9][0] | 8, uneven[9][2])
    assert cut_of(uneven) is None  # the script cuts every shard at one point
    assert cut_of(spans(7)[:-1]) is None
    assert cut_of([(lo, lo, lo | 5) for lo, _ in SHARDS]) is None  # not whole shards
