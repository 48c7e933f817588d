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
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dynamiq.keyspace import ID_MAX
from dynamiq.storage.base import StorageBackend
from dynamiq.storage.lmdb import LmdbBackend
from tests.servers import flush_redis


@pytest.fixture(params=["lmdb", "lmdb-process", "redis", "redis-cluster", "riak", "riak-model"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StorageBackend]:
    store: StorageBackend
    if request.param == "lmdb":
        store = LmdbBackend(tmp_path / "lmdb", map_size=1 << 28)
    elif request.param == "lmdb-process":  # its writes committed by a writer process
        store = LmdbBackend(tmp_path / "lmdb", map_size=1 << 28, writer="process")
    elif request.param == "riak-model":
        # The adapter's own code against a model of Riak's HTTP answers: it
        # runs where no Riak node does, and never stands in for the real one.
        from dynamiq.storage.riak import RiakBackend
        from tests.storage.riak_model import RiakModel

        store = RiakBackend(["http://riak:8098"], transport=RiakModel())
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


async def test_an_insert_into_many_buckets_answers_each_in_its_order(
    backend: StorageBackend,
) -> None:
    # A wide fan-out: a copy into each of 200 buckets, some of whose keys are taken
    buckets = [f"fan-{i:03d}" for i in range(200)]
    taken = buckets[::7]
    assert await backend.insert([(b, 5, b"before") for b in taken]) == [True] * len(taken)
    answers = await backend.insert([(b, 5, b"copy") for b in reversed(buckets)])
    assert answers == [b not in taken for b in reversed(buckets)]
    for b in buckets:
        assert await backend.get(b, [5]) == [b"before" if b in taken else b"copy"]
        assert await backend.count(b) == 1


async def test_a_census_counts_and_cuts_each_stripe(backend: StorageBackend) -> None:
    # Keys in stripes 0, 3 and 255 (the top 8 bits), some before each stripe's cut
    # (due), some after (not due yet); stripe 7 holds only keys after its cut.
    def key(stripe: int, seq: int) -> int:
        return stripe << 55 | seq

    keys = [key(0, 5), key(0, 9), key(0, 500), key(3, 100), key(3, 400), key(3, 401)]
    keys += [key(7, 300), key(255, 1), key(255, (1 << 55) - 1)]
    await backend.insert([("c", k, b"") for k in keys] + [("other", key(0, 1), b"")])
    spans = [(key(s, 0), key(s, 200), key(s, (1 << 55) - 1)) for s in range(256)]
    found = await backend.census("c", spans, cap=10)
    assert found.objects == len(keys)
    firsts = {s: k for s, k in enumerate(found.firsts) if k is not None}
    assert firsts == {0: key(0, 5), 3: key(3, 100), 255: key(255, 1)}
    after = {s: n for s, n in enumerate(found.after) if n}
    assert after == {0: 1, 3: 2, 7: 1, 255: 1}
    assert (await backend.census("c", spans, cap=1)).after[3] == 1  # up to the cap
    # Cut at either end of a stripe: everything due, or only each stripe's first key
    latest = [(lo, hi, hi) for lo, _, hi in spans]
    everything = await backend.census("c", latest, cap=10)
    assert everything.firsts[7] == key(7, 300) and not any(everything.after)
    earliest = await backend.census("c", [(lo, lo, hi) for lo, _, hi in spans], cap=10)
    assert not any(earliest.firsts) and sum(earliest.after) == len(keys)
    # Spans that are not one per stripe: the same answers, as scans give them
    some = [spans[3], (key(0, 0), key(0, 9), key(0, 499))]
    assert await backend.census("c", some, cap=10) == (len(keys), [key(3, 100), key(0, 5)], [2, 0])
    empty = await backend.census("none", spans, cap=10)
    assert empty.objects == 0 and not any(empty.firsts) and not any(empty.after)
    # Asked for at once (a stats page): each its own
    together = await asyncio.gather(*(backend.census(b, spans, 10) for b in ("c", "none", "c")))
    assert together == [found, empty, found]


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


async def test_a_total_counts_every_bucket_together_where_the_store_keeps_one(
    backend: StorageBackend,
) -> None:
    from dynamiq.storage.riak import RiakBackend

    if isinstance(backend, RiakBackend):  # it counts per bucket only
        assert await backend.total() is None
        return
    buckets = ("a", "b", "c")

    async def counted() -> int:
        total = sum([await backend.count(b) for b in buckets])
        assert await backend.total() == total
        return total

    assert await counted() == 0
    await backend.insert([(b, k, b"v") for b in buckets for k in range(50)])
    assert await backend.insert([("a", 1, b"taken"), ("a", 99, b"new")]) == [False, True]
    # Across buckets and stripes at once (on Redis: one script per server)
    assert await backend.insert([("b", 1, b"taken"), ("c", 7 << 55, b"new")]) == [False, True]
    assert await counted() == 152
    await backend.delete("a", [1, 2, 1_000])
    await backend.move([("b", 3, "c", 1_000, b"v"), ("b", 1_000, "c", 1_001, b"v")])
    far = 5 << 55 | 2_001  # in another stripe than its claim's home: hidden, then shown
    await backend.insert_claimed(
        [("c", 2_000, b"v", "c/x", b"1", 2**62, 0), ("c", far, b"v", "c/y", b"2", 2**62, 0)], 0
    )
    assert await counted() == 152
    await backend.drop("b")
    assert await counted() == 103


async def test_drop_empties_a_bucket_only(backend: StorageBackend) -> None:
    for start in range(0, 25_000, 1_000):  # a call each, within a store's deadline
        await backend.insert([("x", k, b"v") for k in range(start, start + 1_000)])
    await backend.insert([("y", 1, b"keep")])
    await backend.drop("x")
    assert await backend.count("x") == 0
    assert await backend.scan("x", [(0, ID_MAX)], 5) == [[]]
    assert await backend.get("y", [1]) == [b"keep"]


async def test_concurrent_inserts_all_land(backend: StorageBackend) -> None:
    results = await asyncio.gather(*(backend.insert([("c", k, b"%d" % k)]) for k in range(500)))
    assert all(r == [True] for r in results)
    assert await backend.count("c") == 500


async def test_replace_overwrites_only_what_exists(backend: StorageBackend) -> None:
    await backend.insert([("b", 1, b"one"), ("b", 2, b"two")])
    assert await backend.replace("b", [(1, b"uno"), (3, b"tres")]) == [True, False]
    assert await backend.get("b", [1, 2, 3]) == [b"uno", b"two", None]
    assert await backend.scan("b", [(0, ID_MAX)], 10) == [[1, 2]]
    assert await backend.count("b") == 2
    await backend.delete("b", [2])
    assert await backend.replace("b", [(2, b"dos")]) == [False]
    assert await backend.get("b", [2]) == [None]


SHARD = 1 << 55  # ids in different top-byte shards (stripes)


async def test_move_within_and_across_buckets(backend: StorageBackend) -> None:
    await backend.insert([("q", 5, b"five"), ("q", 6, b"six"), ("q", 7, b"seven")])
    moved = await backend.move(
        [
            ("q", 5, "q", 50, b"five again"),  # same bucket and shard: one step
            ("q", 6, "q", 2 * SHARD + 6, b"six"),  # same bucket, another shard
            ("q", 7, "dlq", 7, b"seven, dead"),  # another bucket
            ("q", 8, "dlq", 8, b"never stored"),  # no source: nothing written
        ]
    )
    assert moved == [True, True, True, False]
    assert await backend.get("q", [5, 6, 7, 50, 2 * SHARD + 6]) == [
        None,
        None,
        None,
        b"five again",
        b"six",
    ]
    assert await backend.get("dlq", [7, 8]) == [b"seven, dead", None]
    assert await backend.scan("q", [(0, ID_MAX)], 10) == [[50, 2 * SHARD + 6]]
    assert await backend.scan("dlq", [(0, ID_MAX)], 10) == [[7]]
    assert (await backend.count("q"), await backend.count("dlq")) == (2, 1)


async def test_move_onto_a_taken_key_changes_nothing(backend: StorageBackend) -> None:
    await backend.insert([("q", 1, b"one"), ("q", 2, b"two"), ("dlq", 3, b"three")])
    assert await backend.move([("q", 1, "q", 2, b"x"), ("q", 2, "dlq", 3, b"y")]) == [None, None]
    assert await backend.get("q", [1, 2]) == [b"one", b"two"]
    assert await backend.get("dlq", [3]) == [b"three"]
    assert (await backend.count("q"), await backend.count("dlq")) == (2, 1)


async def test_meta_create_put_scan_delete(backend: StorageBackend) -> None:
    assert await backend.meta_create("q/a", b"1")
    assert not await backend.meta_create("q/a", b"2")
    await backend.meta_put({"q/b": b"3", "t/x": b""})
    assert await backend.meta_get("q/a") == b"1"
    assert await backend.meta_get("nope") is None
    assert await backend.meta_scan("q/") == {"q/a": b"1", "q/b": b"3"}
    assert await backend.meta_delete(["q/a", "q/zz"]) == 1
    assert await backend.meta_scan("") == {"q/b": b"3", "t/x": b""}
    # a queue's deletion: its drop marked and its record gone in one call
    await backend.meta_put({"drop/u1": b""}, ["q/b", "s/x/b", "q/zz"])
    assert await backend.meta_scan("") == {"drop/u1": b"", "t/x": b""}
    await backend.meta_put({}, ["drop/u1"])
    assert await backend.meta_scan("") == {"t/x": b""}


async def test_a_meta_scan_takes_its_prefix_literally(backend: StorageBackend) -> None:
    keys = ["g/a*b", "g/a?c", "g/a[b]", "g/a\\d", "g/ab", "g/abc", "h/a*b"]
    await backend.meta_put({key: key.encode() for key in keys})
    assert await backend.meta_scan("g/a*") == {"g/a*b": b"g/a*b"}
    assert await backend.meta_scan("g/a[") == {"g/a[b]": b"g/a[b]"}
    assert await backend.meta_scan("g/a\\") == {"g/a\\d": b"g/a\\d"}
    assert list(await backend.meta_scan("g/ab")) == ["g/ab", "g/abc"]
    assert list(await backend.meta_scan("g/")) == sorted(k for k in keys if k[0] == "g")


async def test_a_claim_holds_its_key_until_it_expires(backend: StorageBackend) -> None:
    now = int(time.time() * 1000)
    later = now + 60_000
    put = backend.insert_claimed
    assert await put(
        [("q", 1, b"a", "q/a", b"1", later, 0), ("q", 2, b"b", "q/b", b"2", later, 0)], now
    ) == [True, True]
    assert await put(
        [("q", 3, b"x", "q/a", b"3", later, 0), ("q", 4, b"c", "q/c", b"4", later, 0)], now
    ) == [b"1", True]
    assert await put([("q", 5, b"x", "q/a", b"5", later, 0)], later - 1) == [b"1"]
    # Expired by the caller's clock: the key is free again, and the new claim holds it.
    assert await put([("q", 6, b"a2", "q/a", b"6", later + 60_000, 0)], later) == [True]
    assert await put([("q", 7, b"x", "q/a", b"7", later + 60_000, 0)], later) == [b"6"]
    assert await put([("r", 8, b"r", "r/a", b"8", later, 0)], now) == [True]  # keys are whole
    assert await backend.get("q", list(range(1, 8))) == [b"a", b"b", None, b"c", None, b"a2", None]


async def test_a_claimed_insert_stores_each_claim_once(backend: StorageBackend) -> None:
    now = int(time.time() * 1000)
    until = now + 60_000
    assert await backend.insert_claimed([("b", 1, b"one", "b/x", b"1", until, 0)], now) == [True]
    answers = await backend.insert_claimed(
        [
            ("b", 2, b"two", "b/x", b"2", until, 0),  # x is held: nothing stored
            ("b", 1, b"taken", "b/y", b"1", until, 0),  # key 1 is taken: y stays free
            ("b", 3, b"three", "b/z", b"3", until, 0),
        ],
        now,
    )
    assert answers == [b"1", False, True]
    assert await backend.get("b", [1, 2, 3]) == [b"one", None, b"three"]
    assert await backend.count("b") == 2
    # Several stripes in one call.
    other = (1 << 55) | 6
    answers = await backend.insert_claimed(
        [
            ("b", 6, b"six", "b/y", b"6", until, 0),
            ("b", 7, b"seven", "b/z", b"7", until, 0),
            ("b", other, b"far", "b/w", b"far", until, 1),
        ],
        now,
    )
    assert answers == [True, b"3", True]
    again = [("b", other + 1, b"again", "b/w", b"again", until, 1)]
    assert await backend.insert_claimed(again, now) == [b"far"]
    assert await backend.get("b", [6, 7, other, other + 1]) == [b"six", None, b"far", None]
    # After the window the same claim stores again.
    assert await backend.insert_claimed([("b", 5, b"five", "b/x", b"5", until + 1, 0)], until) == [
        True
    ]
    assert await backend.get("b", [5]) == [b"five"]


async def test_a_claim_holds_across_stripes(backend: StorageBackend) -> None:
    """Objects in different stripes claiming one key (a queue's deduplication across its
    ordered groups): the first stores, the others are answered with its claim."""
    now = int(time.time() * 1000)
    until = now + 60_000
    home, elsewhere = (5 << 55) | 1, (9 << 55) | 1
    first = [("b", elsewhere, b"first", "b/d", b"first", until, 5)]
    assert await backend.insert_claimed(first, now) == [True]
    answers = await backend.insert_claimed(
        [
            ("b", home, b"home", "b/d", b"home", until, 5),
            ("b", elsewhere + 1, b"other", "b/d", b"other", until, 5),
            ("b", elsewhere + 2, b"free", "b/e", b"free", until, 5),
        ],
        now,
    )
    assert answers == [b"first", b"first", True]
    got = await backend.get("b", [elsewhere, home, elsewhere + 1, elsewhere + 2])
    assert got == [b"first", None, None, b"free"]
    assert await backend.count("b") == 2


async def test_close_is_idempotent(backend: StorageBackend) -> None:
    await backend.close()
    await backend.close()
