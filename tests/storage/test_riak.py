"""What of the Riak adapter runs without a Riak node: siblings, failures, configuration."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable

import aiohttp
import pytest

from dynamiq.config import load_settings
from dynamiq.errors import BackendUnavailable, ConfigError
from dynamiq.storage.riak import RiakBackend, RiakRequest, _siblings
from tests.servers import free_port


def test_siblings_are_read_from_a_multipart_answer() -> None:
    body = (
        b"\r\n--XX\r\nContent-Type: application/octet-stream\r\nEtag: 1\r\n\r\nrecord\r\n"
        b"--XX\r\nContent-Type: application/octet-stream\r\nX-Riak-Deleted: true\r\n"
        b"Etag: 2\r\n\r\n\r\n--XX--\r\n"
    )
    assert _siblings("multipart/mixed; boundary=XX", body) == [(False, b"record"), (True, b"")]


async def test_no_reachable_node_is_a_503_not_a_crash() -> None:
    dead = [f"http://127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    store = RiakBackend([d if d.startswith("http") else f"http://{d}" for d in dead])
    try:
        with pytest.raises(BackendUnavailable, match="no Riak node answered"):
            await store.get("q", [1])
        with pytest.raises(BackendUnavailable):
            await store.meta_scan("")
    finally:
        await store.close()
        await store.close()


def test_the_riak_backend_needs_nodes() -> None:
    with pytest.raises(ConfigError, match=r"core\.riaknodes"):
        load_settings(env={"DYNAMIQ_STORAGE_BACKEND": "riak"})
    s = load_settings(
        env={"DYNAMIQ_STORAGE_BACKEND": "riak", "DYNAMIQ_CORE_RIAKNODES": "a:8098, http://b:8098"}
    )
    assert s.core.riak_nodes() == ["http://a:8098", "http://b:8098"]
    with pytest.raises(ConfigError, match="not host:port"):
        load_settings(env={"DYNAMIQ_CORE_RIAKNODES": "nohost"})


class FakeRiak:
    """A transport standing in for Riak: answers at once, fails, or hangs, per key."""

    def __init__(self, fail: Iterable[int] = (), hang: Iterable[int] = ()) -> None:
        self.fail, self.hang = set(fail), set(hang)
        self.counter = 0
        self.puts: list[int] = []
        self.cancelled = 0
        self.in_flight = 0

    async def __call__(self, request: RiakRequest) -> tuple[int, dict[str, str], bytes]:
        if "/datatypes/" in request.url:  # the depth counter
            if request.method == "POST" and request.data:
                self.counter += json.loads(request.data)["update"]["n_counter"]
            return 200, {}, json.dumps({"value": {"n_counter": self.counter}}).encode()
        key = int(request.url.rsplit("/", 1)[1])
        self.in_flight += 1
        try:
            if key in self.hang:
                await asyncio.sleep(3600)  # a paused node: the request never ends
            await asyncio.sleep(0.01 * (key % 5))
            if key in self.fail:
                raise aiohttp.ServerDisconnectedError()
            if request.method == "PUT":
                self.puts.append(key)
            return (204, {}, b"")
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1

    async def close(self) -> None:
        pass


async def test_a_batch_failing_partway_still_counts_what_it_wrote() -> None:
    fake = FakeRiak(fail={7})
    store = RiakBackend(["http://riak:8098"], pool_size=16, timeout=2.0, transport=fake)
    with pytest.raises(BackendUnavailable):
        await store.insert([("q", k, b"x") for k in range(10)])
    # The counter moved by exactly the writes that were made (no drift below 0).
    assert fake.counter == len(fake.puts) > 0
    assert await store.count("q") == len(fake.puts)
    deleted = list(fake.puts)
    fake.fail = {deleted[-1]}
    with pytest.raises(BackendUnavailable):
        await store.delete("q", deleted)
    assert 0 <= fake.counter < len(fake.puts)
    assert await store.count("q") == fake.counter


async def test_the_first_failure_cancels_the_rest_of_the_batch() -> None:
    fake = FakeRiak(fail={0}, hang={1, 2, 3})
    store = RiakBackend(["http://riak:8098"], pool_size=4, timeout=30.0, transport=fake)
    started = time.monotonic()
    with pytest.raises(BackendUnavailable):
        await store.get("q", [0, 1, 2, 3, 4, 5])
    assert time.monotonic() - started < 1.0  # not the 30 s deadline
    assert fake.in_flight == 0 and fake.cancelled >= 3  # no slot is left held


async def test_a_paused_riak_answers_within_the_timeout_slot_waits_included() -> None:
    fake = FakeRiak(hang=set(range(100)))
    store = RiakBackend(["http://riak:8098"], pool_size=2, timeout=1.0, transport=fake)
    started = time.monotonic()
    results = await asyncio.gather(
        *(store.get("q", [k]) for k in range(10)), return_exceptions=True
    )
    # Ten calls, two slots, every request hangs: each still ends within the
    # timeout, not after queueing behind the others.
    assert time.monotonic() - started < 1.0 + 1.5  # five rounds of queueing would be 5 s
    assert all(isinstance(r, BackendUnavailable) for r in results)
    assert fake.in_flight == 0
