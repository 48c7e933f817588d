"""The catalog's log: a process that missed the announcements follows what changed, one
read a round when nothing did; writers racing for numbers never take the same one;
old entries go; a process that fell behind reads the whole catalog. And an upkeep
round costs the same store reads beside 10,000 idle queues as beside 10."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.janitor import Janitor
from dynamiq.core.queues import QueueService
from dynamiq.storage.lmdb import LmdbBackend


class _Counting:
    """Counts a store's catalog reads (scans and gets), by kind."""

    def __init__(self, store: LmdbBackend) -> None:
        self.scans: list[str] = []
        self.gets: list[str] = []
        scan, get = store.meta_scan, store.meta_get

        async def counted_scan(prefix: str) -> dict[str, bytes]:
            self.scans.append(prefix)
            return await scan(prefix)

        async def counted_get(key: str) -> bytes | None:
            self.gets.append(key)
            return await get(key)

        store.meta_scan = counted_scan  # type: ignore[method-assign]
        store.meta_get = counted_get  # type: ignore[method-assign]

    def clear(self) -> None:
        self.scans.clear()
        self.gets.clear()


async def test_a_process_that_missed_the_news_follows_the_log(store: LmdbBackend) -> None:
    clock = FakeClock()
    here, there = Catalog(store, clock), Catalog(store, clock)  # nobody told of changes
    await here.create_queue("a")
    await there.reload()
    reads = _Counting(store)
    assert await there.follow() == set()
    assert (reads.scans, len(reads.gets)) == ([], 1)  # nothing changed: one read

    await here.create_queue("b")
    await here.create_topic("t")
    await here.subscribe("t", "b")
    uid = here.queue("a").uid
    await here.delete_queue("a")
    reads.clear()
    assert await there.follow() == {uid}
    assert there.queues() == ["b"] and there.topic("t").queues() == ["b"]
    assert reads.scans == ["s/t/"]  # the changed topic's subscriptions; no whole read


async def test_writers_racing_for_numbers_each_get_their_own(store: LmdbBackend) -> None:
    clock = FakeClock()
    writers = [Catalog(store, clock) for _ in range(3)]
    reader = Catalog(store, clock)
    for catalog in (*writers, reader):
        await catalog.reload()
    await asyncio.gather(
        *(w.create_queue(f"w{i}-{n}") for n in range(20) for i, w in enumerate(writers))
    )
    entries = await store.meta_scan("log/")
    # Numbered 1, 2, 3...: none taken twice, none skipped; every change in one of them
    # (a process writes the changes that came while it wrote its last entry as one).
    assert sorted(int(key[4:]) for key in entries) == list(range(1, len(entries) + 1))
    named = [q for raw in entries.values() for q in json.loads(raw)["q"]]
    assert sorted(named) == sorted(f"w{i}-{n}" for n in range(20) for i in range(3))
    await reader.follow()
    assert len(reader.queues()) == 60


async def test_old_entries_go_and_a_process_behind_reads_everything(
    store: LmdbBackend,
) -> None:
    clock = FakeClock()
    here, there = Catalog(store, clock, keep_log=60), Catalog(store, clock, keep_log=60)
    await there.reload()
    for i in range(5):
        await here.create_queue(f"q{i}")
    await there.follow()
    clock.advance(20)
    await here.create_queue("later")
    clock.advance(45)  # the first five are 65 s old, "later" 45 s
    await there.follow()
    await there.trim_log()
    assert len(await store.meta_scan("log/")) == 1

    clock.advance(31)  # "there" did not follow for over half the log's life
    await here.create_queue("missed")
    reads = _Counting(store)
    await there.follow()
    assert "" in reads.scans  # read whole: the log may have lost what it missed
    assert "missed" in there.queues()


async def test_a_change_with_no_entry_is_found_by_the_next_whole_read(
    store: LmdbBackend,
) -> None:
    clock = FakeClock()
    here, there = Catalog(store, clock), Catalog(store, clock)
    await there.reload()
    await here.create_queue("made")
    made = await store.meta_get("q/made")
    assert made is not None
    record = {**json.loads(made), "uid": "0123456789abcdef"}
    # As a writer that died between its change and the change's entry:
    await store.meta_put({"q/unlogged": json.dumps(record).encode()})
    for _ in range(300):  # ten minutes of rounds, following the log
        clock.advance(2)
        await there.follow()
    assert there.queues() == ["made"]
    clock.advance(2)
    await there.follow()
    assert there.queues() == ["made", "unlogged"]


async def _round_reads(store: LmdbBackend, queues: int) -> tuple[int, int]:
    clock = FakeClock()
    catalog = Catalog(store, clock)
    await asyncio.gather(*(catalog.create_queue(f"q{i}") for i in range(queues)))
    engine = QueueService(store, catalog, clock)
    janitor = Janitor(engine, 2.0)
    await janitor.run_once()  # the first round settles what creation left
    reads = _Counting(store)
    await janitor.run_once()
    return len(reads.scans), len(reads.gets)


async def test_an_upkeep_round_reads_as_much_beside_10000_idle_queues_as_beside_10(
    tmp_path: Path,
) -> None:
    counts = []
    for queues in (10, 10_000):
        store = LmdbBackend(tmp_path / str(queues), map_size=1 << 30)
        try:
            counts.append(await _round_reads(store, queues))
        finally:
            await store.close()
    assert counts[0] == counts[1], counts
