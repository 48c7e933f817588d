"""The Riak adapter under failure, against a real Riak KV node behind a proxy that can pause it.

Runs where ``DYNAMIQ_RIAK_URL`` names a Riak KV 3.2 node set up by
``setup.sh --riak URL`` (a Riak node cannot run in CI); skipped elsewhere.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.queues import QueueService
from dynamiq.errors import BackendUnavailable
from dynamiq.keyspace import ID_MAX
from dynamiq.storage.riak import RiakBackend
from tests.proxy import GatedProxy

TIMEOUT = 1.0
POOL = 8


@pytest.fixture
async def proxy() -> AsyncIterator[GatedProxy]:
    url = os.environ.get("DYNAMIQ_RIAK_URL")
    if not url:
        pytest.skip("set DYNAMIQ_RIAK_URL to a Riak KV node to run the Riak failure tests")
    target = urlsplit(url.split(",")[0])
    gate = GatedProxy(target.hostname or "127.0.0.1", target.port or 8098)
    yield gate
    await gate.close()


async def store_behind(proxy: GatedProxy) -> RiakBackend:
    url = await proxy.start()
    return RiakBackend(
        [url], pool_size=POOL, namespace=f"t{secrets.token_hex(4)}-", timeout=TIMEOUT
    )


async def stored_keys(store: RiakBackend, bucket: str) -> list[int]:
    (keys,) = await store.scan(bucket, [(0, ID_MAX)], 1000)
    return keys


async def test_a_batch_cut_partway_moves_the_counter_by_what_riak_stored(
    proxy: GatedProxy,
) -> None:
    store = await store_behind(proxy)
    try:
        await proxy.hold(after=7)
        with pytest.raises(BackendUnavailable):
            await store.insert([("q", k, b"x" * 100) for k in range(1, 21)])
        await proxy.release()
        assert len(await stored_keys(store, "q")) == 7
        assert await store.count("q") == 7
        keys = await stored_keys(store, "q")  # read before the gate: it lets 3 through
        await proxy.hold(after=3)
        with pytest.raises(BackendUnavailable):
            await store.delete("q", keys)
        await proxy.release()
        assert len(await stored_keys(store, "q")) == 4
        assert await store.count("q") == 4
    finally:
        await proxy.release()
        await store.close()


async def test_a_paused_riak_answers_every_call_within_the_timeout(proxy: GatedProxy) -> None:
    store = await store_behind(proxy)
    try:
        await store.insert([("q", 1, b"x")])
        await proxy.hold()
        before = proxy.received
        calls = [
            store.get("q", list(range(1, 40))),
            store.insert([("q", k, b"x") for k in range(100, 140)]),
            store.scan("q", [(0, ID_MAX)], 10),
            store.delete("q", [1]),
            store.meta_scan(""),
            *(store.get("q", [k]) for k in range(20)),  # more callers than connections
        ]
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(r, BackendUnavailable) for r in results)
        # Each call ended at its own deadline, its wait for a connection included:
        # only the requests that had a connection were sent, and at most as many more
        # that took one freed at the deadline's edge (queued behind the others with a
        # deadline of their own, every request of every call would have been sent).
        assert proxy.received - before <= 2 * POOL
    finally:
        await proxy.release()
        await store.close()


async def test_a_receive_that_could_not_read_fails_instead_of_answering_nothing(
    proxy: GatedProxy, fake_clock: FakeClock
) -> None:
    store = await store_behind(proxy)
    try:
        catalog = Catalog(store)
        await catalog.create_queue("q")
        queues = QueueService(store, catalog, fake_clock)
        ids = await queues.publish("q", [b"a", b"b"])
        fake_clock.advance(5)  # past the node's memory of its publishes: a receive reads Riak
        await proxy.hold()
        for _ in range(3):
            with pytest.raises(BackendUnavailable):
                await queues.receive("q", 10)
        await proxy.release()
        assert sorted(m.id for m in await queues.receive("q", 10)) == sorted(ids)
    finally:
        await proxy.release()
        await store.close()
