"""The worker against a real node: every message handled and deleted once, failures
retried, long handlers keep their lease, a stop loses nothing."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dynamiq.client import AsyncClient, Retry
from dynamiq.client.worker import heals
from dynamiq.errors import (
    BackendUnavailable,
    Forbidden,
    Invalid,
    NoMajority,
    QueueNotFound,
    TooManyRequests,
    Unauthorized,
)
from dynamiq.models import Message

Http = TestClient[Any, Any]


def url(http: Http) -> str:
    return str(http.make_url(""))


async def test_a_worker_handles_every_message_once_and_deletes_it(http: Http) -> None:
    async with AsyncClient(url(http)) as client:
        await client.create_queue("w")
        ids = [
            mid
            for k in range(3)
            for mid in await client.publish("w", [f"m{k}.{i}" for i in range(100)])
        ]
        seen: list[int] = []

        async def handle(message: Message) -> None:
            await asyncio.sleep(0.001)
            seen.append(message.id)

        report = await client.consume("w", handle, concurrency=16, batch=50, idle_timeout=1.0)
        assert sorted(seen) == sorted(ids)
        assert (report.received, report.succeeded, report.failed) == (300, 300, 0)
        assert (await client.queue("w"))["stats"]["depth"] == 0


async def test_a_failed_message_is_released_and_handled_again(lmdb_http: Http) -> None:
    async with AsyncClient(url(lmdb_http)) as client:
        await client.create_queue("f", visibility_timeout=30)
        ids = await client.publish("f", [f"m{i}" for i in range(20)])
        attempts: dict[int, list[int]] = {}

        def handle(message: Message) -> None:  # a plain function: run in threads
            attempts.setdefault(message.id, []).append(message.receive_count)
            if message.receive_count == 1:
                raise ValueError("first time fails")

        report = await client.consume("f", handle, concurrency=4, idle_timeout=1.0)
        # released at once (the queue has no backoff), not after the 30 s lease
        assert attempts == {mid: [1, 2] for mid in ids}
        assert (report.succeeded, report.failed) == (20, 20)
        assert (await client.queue("f"))["stats"]["depth"] == 0


async def test_a_handler_names_its_retry_delay(lmdb_http: Http) -> None:
    async with AsyncClient(url(lmdb_http)) as client:
        await client.create_queue("r")
        await client.publish("r", ["once"])
        times: list[float] = []

        async def handle(message: Message) -> None:
            times.append(time.monotonic())
            if len(times) == 1:
                raise Retry(1.5)

        report = await client.consume("r", handle, idle_timeout=3.0)
        assert report.failed == 1 and report.succeeded == 1
        assert times[1] - times[0] >= 1.4


async def test_a_long_handler_keeps_its_lease(lmdb_http: Http) -> None:
    async with AsyncClient(url(lmdb_http)) as client, AsyncClient(url(lmdb_http)) as other:
        await client.create_queue("l")
        (mid,) = await client.publish("l", ["slow"])
        raced: list[Message] = []

        async def handle(message: Message) -> None:
            assert message.id == mid
            # three visibility timeouts long: another consumer must not get it meanwhile
            for _ in range(6):
                await asyncio.sleep(0.5)
                raced.extend(await other.receive("l", 10))

        report = await client.consume("l", handle, visibility_timeout=1.0, limit=1)
        assert raced == []
        assert (report.succeeded, report.leases_lost) == (1, 0)
        assert (await client.queue("l"))["stats"]["depth"] == 0


async def test_a_stopped_worker_finishes_what_runs_and_releases_the_rest(
    lmdb_http: Http,
) -> None:
    async with AsyncClient(url(lmdb_http)) as client:
        await client.create_queue("s", visibility_timeout=60)
        ids = await client.publish("s", [f"m{i}" for i in range(100)])
        handled: list[int] = []
        started = threading.Event()

        def handle(message: Message) -> None:
            time.sleep(0.02)
            handled.append(message.id)
            started.set()

        worker = client.worker(
            "s",
            handle,
            concurrency=2,
            batch=20,
            max_in_flight=40,
        )

        def stop_mid_run() -> None:  # from another thread, once the first is handled
            started.wait(30)
            worker.stop()

        threading.Thread(target=stop_mid_run).start()
        report = await worker.run()
        assert 0 < report.succeeded == len(handled) < 100
        assert report.received == report.succeeded + report.released
        # what was released is visible at once (not after the 60 s lease), and the
        # rest of the queue is handled by the next worker, none of it twice
        again = await client.consume("s", lambda m: handled.append(m.id), idle_timeout=1.0)
        assert again.received == 100 - report.succeeded
        assert sorted(handled) == sorted(ids)


async def test_a_worker_ends_on_an_error_that_waiting_does_not_heal(http: Http) -> None:
    # Given a queue that does not exist (a typo, or deleted)
    async with AsyncClient(url(http)) as client:
        handled: list[Message] = []
        # When a worker with two receivers consumes it, with no idle timeout
        worker = client.worker("no-such-queue", handled.append, receivers=2)
        # Then it ends with the node's error instead of asking again for ever
        with pytest.raises(QueueNotFound):
            await asyncio.wait_for(worker.run(), 10.0)
        assert handled == []


def test_only_errors_that_waiting_may_heal_are_retried() -> None:
    healing = [BackendUnavailable("down"), NoMajority(1, 3), TooManyRequests("slow down")]
    lasting = [QueueNotFound("q"), Forbidden("no"), Unauthorized("who?"), Invalid("bad", "x")]
    assert all(heals(e) for e in healing)
    assert not any(heals(e) for e in lasting)
