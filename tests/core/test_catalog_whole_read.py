"""A whole read of the catalog (at start, and every ten minutes all the same) decodes only
the records that changed since it last read them, tells every version of a record
apart even within one millisecond, reads a catalog larger than one of the store's
chunks entire, and lets the event loop run between chunks of its work."""

from __future__ import annotations

import asyncio

from dynamiq.core.catalog.catalog import YIELD_EVERY, Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.storage.lmdb.backend import META_CHUNK, LmdbBackend


async def test_a_whole_read_keeps_what_did_not_change_and_takes_what_did(
    store: LmdbBackend,
) -> None:
    clock = FakeClock()  # never moves: every change in the same millisecond
    here, there = Catalog(store, clock), Catalog(store, clock)
    for name in ("a", "b", "c"):
        await here.create_queue(name)
    await there.reload()
    before = {name: there.queue(name) for name in ("a", "b", "c")}
    await here.configure_queue("b", {"visibility_timeout": 7})
    await there.reload()  # that change seen
    await here.configure_queue("b", {"visibility_timeout": 9})  # the same millisecond
    purged = await here.purge_queue("c", 0)
    await there.reload()
    assert there.queue("a") is before["a"]  # unchanged: the record already held
    assert there.queue("b").settings.visibility_timeout == 9
    assert there.queue("c").uid != purged == before["c"].uid
    assert there.queue("b").modified_ms > before["b"].modified_ms + 1  # two versions later


async def test_a_scan_reads_more_entries_than_a_chunk_each_once(store: LmdbBackend) -> None:
    entries = {f"q/x{i:06d}": b"%d" % i for i in range(META_CHUNK * 2 + 7)}
    await store.meta_put(entries)
    await store.meta_put({"r/after": b"", "p/before": b""})
    assert await store.meta_scan("q/") == entries
    assert len(await store.meta_scan("")) == len(entries) + 2


async def test_a_whole_read_lets_the_deleted_buckets_go_and_the_loop_run(
    store: LmdbBackend,
) -> None:
    clock = FakeClock()
    here, there = Catalog(store, clock), Catalog(store, clock)
    names = [f"q{i:05d}" for i in range(3 * YIELD_EVERY)]
    await asyncio.gather(*(here.create_queue(name) for name in names))
    await there.reload()
    deleted = {there.queue(name).uid for name in names[::100]}
    for name in names[::100]:
        await here.delete_queue(name)
    turns, reading = 0, True

    async def count_turns() -> None:
        nonlocal turns
        while reading:
            turns += 1
            await asyncio.sleep(0)

    counting = asyncio.create_task(count_turns())
    gone = await there.reload()
    reading = False
    await counting
    assert gone == deleted and there.queues() == [n for n in names if n not in names[::100]]
    # Records read, then names taken, each in chunks: the loop turned between them
    assert turns >= 2 * (len(names) // YIELD_EVERY)
