"""The lease journal on a real LMDB store with a fake clock: what it keeps, when it
lets go, and what a replay stores."""

from __future__ import annotations

import asyncio
from pathlib import Path

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.custody.journal import SEGMENT_SECONDS, LeaseJournal, read
from dynamiq.core.queues import QueueService
from dynamiq.storage.lmdb import LmdbBackend


async def _node(
    store: LmdbBackend, clock: FakeClock, directory: Path, name: str
) -> tuple[QueueService, LeaseJournal]:
    catalog = Catalog(store)
    await catalog.reload()
    if catalog.find("q") is None:
        await catalog.create_queue("q")
    journal = LeaseJournal(directory, name, clock)
    return QueueService(store, catalog, clock, journal=journal), journal


async def _one_leased(
    store: LmdbBackend, clock: FakeClock, directory: Path, seconds: float
) -> tuple[QueueService, LeaseJournal, int]:
    """Node ``n1``, with one message of ``q`` published and leased for ``seconds``."""
    queues, journal = await _node(store, clock, directory, "n1")
    (mid,) = await queues.publish("q", [b"m"])
    await queues.receive("q", 1, visibility_timeout=seconds)
    return queues, journal, mid


def _files(directory: Path) -> list[str]:
    return sorted(p.name.split(".")[0] for p in directory.glob("*.journal"))


async def _files_in(directory: Path) -> list[str]:
    """The nodes whose journal files are in ``directory`` (read off the event loop)."""
    return await asyncio.to_thread(_files, directory)


async def _only(directory: Path) -> Path:
    (path,) = await asyncio.to_thread(lambda: list(directory.glob("*.journal")))
    return path


async def test_a_segment_goes_once_its_leases_are_settled(
    store: LmdbBackend, fake_clock: FakeClock, tmp_path: Path
) -> None:
    queues, journal = await _node(store, fake_clock, tmp_path / "j", "n1")
    await queues.publish("q", [b"deleted", b"held"])
    got = await queues.receive("q", 2, visibility_timeout=60)
    assert [m.receive_count for m in got] == [1, 1]
    path = await _only(tmp_path / "j")
    assert [sorted(n.id for n in d) for _, d in await asyncio.to_thread(read, path)] == [
        sorted(m.id for m in got)
    ]
    await queues.delete("q", [got[0].id])
    fake_clock.advance(SEGMENT_SECONDS)
    await queues.sweep()  # closes the segment; one of its leases is still held
    assert await _files_in(tmp_path / "j") == ["n1"]
    fake_clock.advance(60)
    await queues.sweep()  # the lease lapsed and its count was stored: nothing left to keep
    journal.close()
    assert await _files_in(tmp_path / "j") == []
    assert (await queues.peek("q", got[1].id)).receive_count == 1


async def test_a_replay_stores_the_counts_of_nodes_gone_and_holds_their_leases(
    store: LmdbBackend, fake_clock: FakeClock, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    dead, dead_journal = await _node(store, fake_clock, directory, "10.0.0.1:7946")
    ids = await dead.publish("q", [b"a", b"b"])
    await dead.receive("q", 2, visibility_timeout=30)
    await dead.receive("q", 2)  # nothing more: both are leased
    dead_journal.close()  # (the writes are done; the node is killed, not stopped)
    survivor, _ = await _node(store, fake_clock, directory, "10.0.0.2:7946")
    assert (await survivor.custody.replay(["10.0.0.1:7946", "10.0.0.2:7946"])).stored == 0
    assert [(await survivor.peek("q", mid)).receive_count for mid in ids] == [0, 0]
    fake_clock.advance(10)
    assert (await survivor.custody.replay(["10.0.0.2:7946"])).stored == 2
    assert [(await survivor.peek("q", mid)).receive_count for mid in ids] == [1, 1]
    # The consumer of the dead node holds them for 20 s more: so does the survivor,
    assert await survivor.receive("q", 2) == []
    # and the file stays for any other node taking over a part of that slice.
    assert "10_0_0_1_7946" in await _files_in(directory)
    fake_clock.advance(20)
    assert sorted(m.id for m in await survivor.receive("q", 2)) == sorted(ids)
    await survivor.custody.replay(["10.0.0.2:7946"])
    assert "10_0_0_1_7946" not in await _files_in(directory)  # no lease of it lives: gone


async def test_an_extension_is_journaled_and_held_by_the_node_taking_over(
    store: LmdbBackend, fake_clock: FakeClock, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    dead, dead_journal, mid = await _one_leased(store, fake_clock, directory, 5)
    assert await dead.change_visibility("q", [mid], 60) == [mid]
    dead_journal.close()
    survivor, _ = await _node(store, fake_clock, directory, "n2")
    await survivor.custody.replay(["n2"])
    fake_clock.advance(30)
    assert await survivor.receive("q", 1) == []
    fake_clock.advance(30)
    assert [m.id for m in await survivor.receive("q", 1)] == [mid]


async def test_a_node_that_stood_down_extends_no_lease_the_others_would_not_know_of(
    store: LmdbBackend, fake_clock: FakeClock, tmp_path: Path
) -> None:
    """Once a node stops serving (SIGTERM, a pause, a lost majority) its journal is what the
    others hold its leases by: an extension it could make then would not be in it, so
    it makes none, and the consumer hears that the lease was not extended."""
    directory = tmp_path / "j"
    leaving, _, mid = await _one_leased(store, fake_clock, directory, 5)
    leaving.close()  # shutting down: the journal is closed, then the node stands down
    leaving.states.set_keyspace(None)
    assert await leaving.change_visibility("q", [mid], 60) == []
    survivor, _ = await _node(store, fake_clock, directory, "n2")
    await survivor.custody.replay(["n2"])
    fake_clock.advance(4)
    assert await survivor.receive("q", 1) == []  # the lease the journal holds runs on
    fake_clock.advance(2)
    assert [m.id for m in await survivor.receive("q", 1)] == [mid]


async def test_a_replay_leaves_a_segment_its_node_may_still_write_to(
    store: LmdbBackend, fake_clock: FakeClock, tmp_path: Path
) -> None:
    """A node replays the journals of the nodes its view lacks: one just restarted may be
    among them, writing to a segment whose first leases have ended. Deleting that
    file would lose the leases the node writes to it next."""
    directory = tmp_path / "j"
    restarted, _ = await _node(store, fake_clock, directory, "n1")
    first, second = await restarted.publish("q", [b"first", b"second"])
    await restarted.receive("q", 1, visibility_timeout=1)  # opens a segment
    lagging, _ = await _node(store, fake_clock, directory, "n2")
    fake_clock.advance(SEGMENT_SECONDS * 0.75)  # that lease ended; the segment is open
    await lagging.custody.replay(["n2"])  # its view lacks n1
    again = await restarted.receive("q", 2, visibility_timeout=30)  # into the same segment
    assert sorted(m.id for m in again) == [first, second]
    assert await _files_in(directory) == ["n1"]
    # n1 stops without a handoff: the node taking over its slice holds what it leased
    fake_clock.advance(2)
    await lagging.custody.replay(["n2"])
    assert await lagging.receive("q", 2) == []


async def test_a_restarted_node_holds_the_leases_of_its_previous_life(
    store: LmdbBackend, fake_clock: FakeClock, tmp_path: Path
) -> None:
    directory = tmp_path / "j"
    _, journal, mid = await _one_leased(store, fake_clock, directory, 30)
    journal.close()  # killed
    (past,) = await asyncio.to_thread(lambda: list(directory.glob("*.journal")))
    restarted, restarted_journal = await _node(store, fake_clock, directory, "n1")
    assert (await restarted.custody.replay()).stored == 1
    assert await restarted.receive("q", 1) == []
    # A node taking over before the restarted one is back in its view finds the
    # lease too: the past life's file stays while a lease in it lives,
    other, _ = await _node(store, fake_clock, directory, "n2")
    await other.custody.replay(["n2"])
    assert await other.receive("q", 1) == []
    restarted_journal.tidy()
    assert await asyncio.to_thread(past.exists)
    # and goes once it ended.
    fake_clock.advance(30)
    restarted_journal.tidy()
    assert not await asyncio.to_thread(past.exists)
    assert [m.id for m in await restarted.receive("q", 1)] == [mid]


async def test_an_entry_cut_short_by_the_crash_is_left_out(
    store: LmdbBackend, fake_clock: FakeClock, tmp_path: Path
) -> None:
    queues, journal = await _node(store, fake_clock, tmp_path / "j", "n1")
    (mid,) = await queues.publish("q", [b"m"])
    await queues.receive("q", 1)
    journal.close()
    path = await _only(tmp_path / "j")
    whole = await asyncio.to_thread(path.read_bytes)
    # A second entry, half written when the node was killed:
    await asyncio.to_thread(path.write_bytes, whole + whole[: len(whole) // 2])
    assert len(await asyncio.to_thread(read, path)) == 1
    restarted, _ = await _node(store, fake_clock, tmp_path / "j", "n1")
    assert (await restarted.custody.replay()).stored == 1
    assert (await restarted.peek("q", mid)).receive_count == 1
