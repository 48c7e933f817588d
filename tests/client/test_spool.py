"""The producer spool: publishes no node takes are kept on disk, fsynced, and sent in
order once a node answers, also by the next process after a kill -9."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from dynamiq.client import AsyncClient
from dynamiq.client.spool import Spool, SpoolBusy, SpoolFull

Http = TestClient[Any, Any]

PRODUCER = textwrap.dedent(
    """
    import signal, sys
    from dynamiq.client import Client

    url, spool, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    client = Client(url, spool=spool, rounds=1, backoff=0.01)
    for start in range(0, count, 20):
        answer = client.publish("sp", [f"m{i}" for i in range(start, start + 20)])
        assert answer.spooled and not answer, answer
    print("spooled", count, flush=True)
    signal.pause()  # killed here
    """
)

RESUMER = textwrap.dedent(
    """
    import sys, time
    from dynamiq.client import Client

    with Client(sys.argv[1], spool=sys.argv[2]) as client:
        answer = client.publish("sp", ["after"])  # behind what waits, so spooled too
        deadline = time.monotonic() + 30
        while client.spool_pending and time.monotonic() < deadline:
            time.sleep(0.05)
        print("pending" if client.spool_pending else "sent", answer.spooled, flush=True)
    """
)


def data_size(spool: str) -> int:
    return os.path.getsize(Path(spool) / "data")


def url(http: Http) -> str:
    return str(http.make_url(""))


async def run_python(script: str, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, *args, stdout=asyncio.subprocess.PIPE
    )


async def test_spooled_while_down_survives_kill_9_and_is_sent_in_order_after(
    lmdb_http: Http, tmp_path: Path, down_url: str
) -> None:
    spool = str(tmp_path / "spool")
    async with AsyncClient(url(lmdb_http)) as client:
        await client.create_queue("sp")
        # Given a producer that published 1,000 messages while no node was up
        producer = await run_python(PRODUCER, down_url, spool, "1000")
        assert producer.stdout is not None
        line = await asyncio.wait_for(producer.stdout.readline(), 60)
        assert line.split() == [b"spooled", b"1000"]
        # When it is killed -9 (every spooled publish was fsynced before it returned)
        producer.send_signal(signal.SIGKILL)
        await producer.wait()
        assert (await client.queue("sp"))["stats"]["depth"] == 0
        assert data_size(spool) > 10_000
        # Then the next process with that spool sends it all, in order, once a node is up
        resumer = await run_python(RESUMER, url(lmdb_http), spool)
        out, _ = await asyncio.wait_for(resumer.communicate(), 60)
        assert out.split() == [b"sent", b"True"]
        bodies: list[str] = []
        while got := await client.receive("sp", 100):
            bodies += [m.body.decode() for m in got]
            await client.delete("sp", [m.id for m in got])
        assert bodies == [f"m{i}" for i in range(1000)] + ["after"]
        assert data_size(spool) == 0  # truncated once all was taken


async def test_an_async_client_spools_while_down_and_sends_when_up(
    lmdb_http: Http, tmp_path: Path, down_url: str
) -> None:
    async with AsyncClient(url(lmdb_http)) as client:
        await client.create_queue("a")
    async with AsyncClient(down_url, spool=tmp_path / "s", rounds=1, backoff=0.01) as producer:
        answer = await producer.publish("a", ["one", "two"])
        topic = await producer.publish_topic("t", ["three"])
        assert answer.spooled and answer == [] and topic.spooled and topic == {}
    async with AsyncClient(url(lmdb_http), spool=tmp_path / "s") as producer:
        assert await producer.flush_spool() == 2  # the topic does not exist: set aside
        assert not producer.spool_pending
    rejected = (tmp_path / "s" / "rejected").read_text()
    assert "TOPIC_NOT_FOUND" in rejected and "three" in rejected
    async with AsyncClient(url(lmdb_http)) as client:
        assert [m.body for m in await client.receive("a", 10)] == [b"one", b"two"]


def test_a_torn_last_record_is_cut_off(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append("/v2/queues/q/messages", {"messages": [{"body": "kept"}]})
    spool.append("/v2/queues/q/messages", {"messages": [{"body": "torn"}]})
    spool.close()
    data = tmp_path / "data"
    os.truncate(data, os.path.getsize(data) - 3)  # a crash in the middle of the write
    spool = Spool(tmp_path)
    assert [p["messages"][0]["body"] for _, _, p in spool.waiting()] == ["kept"]
    ((offset, _, _),) = spool.waiting()
    spool.acknowledge(offset)
    assert not spool.pending and os.path.getsize(data) == 0


def test_a_full_spool_refuses_clearly_and_keeps_what_it_had(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=300)
    spool.append("/v2/queues/q/messages", {"messages": [{"body": "x" * 100}]})
    with pytest.raises(SpoolFull, match="limit of 300"):
        spool.append("/v2/queues/q/messages", {"messages": [{"body": "y" * 200}]})
    assert len(list(spool.waiting())) == 1


def test_one_process_at_a_time(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    with pytest.raises(SpoolBusy):
        Spool(tmp_path)
    spool.close()
    Spool(tmp_path).close()
