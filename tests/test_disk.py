"""A full disk under a node's embedded store: publishes are refused before the store
runs out of room, consumers are served throughout, and publishes come back after a
drain, with nothing acknowledged lost. A real, small file system (tmpfs) is mounted
for each test: root only (the tests skip elsewhere, and fail in CI without it)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from dynamiq.client import Client
from dynamiq.errors import BackendUnavailable, DiskLow, DynamiqError
from tests.conftest import NodeFactory
from tests.servers import redis_server
from tests.waiting import until

MIB = 1 << 20
LIMIT = 12 * MIB  # limits.diskfreelimit on a 40 MiB disk
RESERVE = 4 * MIB
BODY = 60_000


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 40 MiB tmpfs mounted at a fresh directory, unmounted after the test."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("mounting a small file system needs root in CI", pytrace=False)
        pytest.skip("mounting a small file system needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _node(node_factory: NodeFactory, disk: Path) -> Client:
    node = node_factory(
        "--limits-diskfreelimit",
        str(LIMIT),
        "--limits-diskreserve",
        str(RESERVE),
        "--core-workers",
        "2",
        data=disk / "data",
    ).start()
    return Client(node.url, rounds=1)


def _flood(
    client: Client,
    queue: str,
    tag: str,
    most: int = 2000,
    refusal: type[BackendUnavailable] = DiskLow,
) -> tuple[list[bytes], int]:
    """Publish 60 KB bodies one after another until 20 in a row are refused for want of
    room (as ``refusal``, told to wait 5 s); return the bodies acknowledged, and how
    many were refused."""
    acknowledged: list[bytes] = []
    refusals: list[BackendUnavailable] = []
    in_a_row = 0
    for i in range(most):
        body = f"{tag}-{i:06d}-".encode().ljust(BODY, b"x")
        try:
            client.publish(queue, [body])
        except BackendUnavailable as exc:
            refusals.append(exc)
            in_a_row += 1
            if in_a_row == 20:
                break
        else:
            acknowledged.append(body)
            in_a_row = 0
    assert all(isinstance(e, refusal) and e.retry_after == 5 for e in refusals), refusals
    return acknowledged, len(refusals)


def _fill(path: Path) -> None:
    """Write ``path`` until its file system has no byte left."""
    with path.open("wb") as out, pytest.raises(OSError, match="No space left on device"):
        _write_forever(out)


def _write_forever(out: BinaryIO) -> None:
    while True:
        out.write(b"\0" * MIB)
        out.flush()


def _drain(client: Client, queue: str, want: int | None = None) -> list[bytes]:
    """Receive and delete until nothing comes (or ``want`` came); return the bodies."""
    got: list[bytes] = []
    while want is None or len(got) < want:
        batch = client.receive(queue, 50, wait_seconds=0.2)
        if not batch:
            break
        assert client.delete(queue, [m.id for m in batch]) == [m.id for m in batch]
        got += [m.body for m in batch]
    return got


def test_a_publish_flood_is_refused_before_the_disk_fills_and_a_drain_makes_room(
    node_factory: NodeFactory, small_disk: Path
) -> None:
    with _node(node_factory, small_disk) as client:
        client.create_queue("q")
        # Given a flood of publishes, one after another, until the disk is refused
        first, refused = _flood(client, "q", "a")
        assert first and refused == 20  # every refusal is DISK_LOW, none a store failure
        free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
        assert free >= LIMIT - 2 * MIB  # refused before the store could run out of room
        # Then consumers are served, and their deletes commit
        drained = _drain(client, "q", len(first) // 2)
        # And publishes are taken again once they made room, without a restart
        second: list[bytes] = []

        def taken_again() -> bool:
            more, _ = _flood(client, "q", "b", 5)
            second.extend(more)
            return bool(more)

        until(taken_again, 10.0, step=0.5)
        # Nothing acknowledged was lost
        rest = _drain(client, "q")
        assert sorted(drained + rest) == sorted(first + second)


def test_a_disk_filled_by_something_else_still_takes_deletes_and_recovers(
    node_factory: NodeFactory, small_disk: Path
) -> None:
    with _node(node_factory, small_disk) as client:
        client.create_queue("q")
        published = [f"m{i}".encode().ljust(BODY, b"x") for i in range(40)]
        for body in published:
            client.publish("q", [body])
        # Given a disk that something else fills to the last byte
        filler = small_disk / "filler"
        _fill(filler)
        # Then publishes are refused as DISK_LOW, never a store failure
        with pytest.raises(DiskLow):
            client.publish("q", [b"one more"])
        # ...receives and deletes are answered (the reserve made room for them)
        got = _drain(client, "q")
        assert sorted(got) == sorted(published)
        # And once the disk has room again, publishes are taken without a restart
        filler.unlink()

        def taken() -> bool:
            try:
                client.publish("q", [b"after"])
            except DynamiqError:
                return False
            return True

        until(taken, 10.0, step=0.5)
        assert _drain(client, "q") == [b"after"]
        # ...and the reserve is kept again for the next time
        reserve = small_disk / "data" / "reserve"
        until(lambda: reserve.exists() and reserve.stat().st_size == RESERVE, 10.0)


def test_a_redis_store_out_of_memory_refuses_publishes_and_takes_deletes(
    node_factory: NodeFactory, tmp_path: Path
) -> None:
    import redis

    with redis_server(tmp_path / "redis") as url:
        server = redis.Redis.from_url(url)
        node = node_factory("--storage-backend", "redis", "--storage-url", url).start()
        with Client(node.url, rounds=1) as client:
            client.create_queue("q")
            # Given a server that may hold 8 MiB more than it holds now, and evicts nothing
            used = int(server.info("memory")["used_memory"])
            server.config_set("maxmemory-policy", "noeviction")
            server.config_set("maxmemory", str(used + 8 * MIB))
            # Then a flood is refused with a 503 that says when to try again
            first, refused = _flood(client, "q", "a", refusal=BackendUnavailable)
            assert first and refused == 20
            # ...consumers are served and make room, and publishes are taken again
            drained = _drain(client, "q")
            second, _ = _flood(client, "q", "b", 5, refusal=BackendUnavailable)
            assert len(second) == 5
            assert sorted(drained + _drain(client, "q")) == sorted(first + second)
        server.close()
