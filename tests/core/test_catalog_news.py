"""Catalog changes as deltas: a change says what it wrote, another process reads only
that again, and reads racing with changes (or with faster reads) never put back what
was replaced. Two catalogs on one real store stand for two processes."""

from __future__ import annotations

import asyncio

import msgspec

from dynamiq.cluster.wire import CatalogChange
from dynamiq.core.catalog import Catalog
from dynamiq.core.catalog.news import CatalogNews
from dynamiq.errors import QueueNotFound
from dynamiq.models import QueueSettings
from dynamiq.storage.lmdb import LmdbBackend


class _Told:
    """What a catalog's changes said, in order."""

    def __init__(self) -> None:
        self.news: list[CatalogNews] = []

    async def __call__(self, news: CatalogNews) -> None:
        self.news.append(news)


class _Reads:
    """Counts a store's catalog reads; ``hold_next_get`` makes the next ``meta_get``
    wait for ``release`` after it read (a slow read)."""

    def __init__(self, store: LmdbBackend) -> None:
        self.scans: list[str] = []
        self.gets = 0
        self.release = asyncio.Event()
        self.held = asyncio.Event()  # a read is held, after it read
        self.hold_next_get = False
        scan, get = store.meta_scan, store.meta_get

        async def counted_scan(prefix: str) -> dict[str, bytes]:
            self.scans.append(prefix)
            return await scan(prefix)

        async def counted_get(key: str) -> bytes | None:
            self.gets += 1
            found = await get(key)
            if self.hold_next_get:
                self.hold_next_get = False
                self.held.set()
                await self.release.wait()
            return found

        store.meta_scan = counted_scan  # type: ignore[method-assign]
        store.meta_get = counted_get  # type: ignore[method-assign]


def _hold_next_scan(store: LmdbBackend) -> tuple[asyncio.Event, asyncio.Event]:
    """Make the store's next ``meta_scan`` (that one alone) wait, once it has read, for
    the second event; the first is set when it has read."""
    scan = store.meta_scan
    started, release = asyncio.Event(), asyncio.Event()

    async def slow_scan(prefix: str) -> dict[str, bytes]:
        store.meta_scan = scan  # type: ignore[method-assign]
        found = await scan(prefix)
        started.set()
        await release.wait()
        return found

    store.meta_scan = slow_scan  # type: ignore[method-assign]
    return started, release


async def test_a_change_tells_what_it_wrote_and_the_other_reads_only_that(
    store: LmdbBackend,
) -> None:
    told = _Told()
    here, there = Catalog(store, on_change=told), Catalog(store)
    for i in range(50):
        await here.create_queue(f"q{i}")
    await there.reload()
    reads = _Reads(store)

    await here.create_queue("new", QueueSettings(visibility_timeout=7))
    assert told.news[-1] == CatalogNews(frozenset({"new"}))
    assert await there.refresh(told.news[-1]) == set()
    assert there.queue("new").settings.visibility_timeout == 7
    assert (reads.scans, reads.gets) == ([], 1)  # one record read, no scan

    await here.create_topic("t")
    assert told.news[-1] == CatalogNews(topics=frozenset({"t"}))
    await there.refresh(told.news[-1])
    assert reads.scans == ["s/t/"]  # a new topic: read whole (not the catalog)
    await here.subscribe("t", "new", "a.*")
    assert told.news[-1] == CatalogNews(subscriptions=frozenset({"t/new"}))
    gets = reads.gets
    await there.refresh(told.news[-1])
    assert there.topic("t").route("a.b") == ["new"]
    assert (reads.scans, reads.gets) == (["s/t/"], gets + 1)  # the one subscription

    uid = there.queue("new").uid
    await here.delete_queue("new")
    assert told.news[-1] == CatalogNews(frozenset({"new"}), subscriptions=frozenset({"t/new"}))
    assert await there.refresh(told.news[-1]) == {uid}  # its bucket let go
    assert there.find("new") is None and there.topic("t").queues() == []
    assert len(there.queues()) == 50 and reads.scans == ["s/t/"]


async def test_subscription_news_reaches_a_process_of_an_earlier_release_as_its_topic() -> None:
    news = CatalogNews(
        frozenset({"q"}), frozenset({"whole"}), subscriptions=frozenset({"t/q", "whole/q"})
    )
    queues, topics, partial, subscriptions = news.told()
    assert topics == ["t", "whole"] and partial == ["t"]  # an earlier release reads t whole
    assert CatalogNews.heard(queues, topics, partial, subscriptions) == news
    assert CatalogNews.heard(["q"], ["t"]) == CatalogNews(frozenset({"q"}), frozenset({"t"}))
    old = msgspec.json.decode(b'{"queues": [], "topics": ["t"]}', type=CatalogChange)
    heard = CatalogNews.heard(old.queues, old.topics, old.partial, old.subscriptions)
    assert heard == CatalogNews(topics=frozenset({"t"}))  # read whole, as it used to be


async def test_a_whole_read_of_a_topic_keeps_what_changed_one_subscription_meanwhile(
    store: LmdbBackend,
) -> None:
    told = _Told()
    here, there = Catalog(store, on_change=told), Catalog(store)
    for name in ("q", "r", "s"):
        await here.create_queue(name)
    await here.create_topic("t")
    await here.subscribe("t", "q")
    await here.subscribe("t", "s")
    await there.reload()
    started, release = _hold_next_scan(store)
    whole = asyncio.create_task(there.refresh(CatalogNews(topics=frozenset({"t"}))))
    await started.wait()  # it found q and s subscribed
    await there.subscribe("t", "r")  # made in this process meanwhile
    await here.unsubscribe("t", "q")  # made elsewhere, read here by a faster read
    await there.refresh(told.news[-1])
    assert there.topic("t").queues() == ["r", "s"]
    release.set()
    await whole
    assert there.topic("t").queues() == ["r", "s"]  # neither q put back nor r lost


async def test_a_purge_lets_the_old_bucket_go(store: LmdbBackend) -> None:
    told = _Told()
    here, there = Catalog(store, on_change=told), Catalog(store)
    await here.create_queue("q")
    await there.reload()
    old = there.queue("q").uid
    await here.purge_queue("q", 0)
    assert await there.refresh(told.news[-1]) == {old}
    assert there.queue("q").uid == here.queue("q").uid != old


async def _held_read(
    store: LmdbBackend,
) -> tuple[Catalog, Catalog, _Told, _Reads, asyncio.Task[set[str]]]:
    """Two processes' catalogs with queue ``q``; "there" reading ``q`` again, its read
    held after it read the record as it was (release it with ``reads.release``)."""
    told = _Told()
    here, there = Catalog(store, on_change=told), Catalog(store)
    await here.create_queue("q")
    await there.reload()
    reads = _Reads(store)
    reads.hold_next_get = True
    slow = asyncio.create_task(there.refresh(CatalogNews(frozenset({"q"}))))
    await reads.held.wait()
    return here, there, told, reads, slow


async def test_a_slow_read_does_not_put_back_what_a_faster_one_replaced(
    store: LmdbBackend,
) -> None:
    here, there, told, reads, slow = await _held_read(store)
    await here.configure_queue("q", {"visibility_timeout": 9})
    await there.refresh(told.news[-1])  # a faster read, started later
    assert there.queue("q").settings.visibility_timeout == 9
    reads.release.set()
    await slow
    assert there.queue("q").settings.visibility_timeout == 9  # not put back


async def test_a_read_does_not_undo_a_change_made_here_meanwhile(store: LmdbBackend) -> None:
    _, there, _, reads, slow = await _held_read(store)
    await there.configure_queue("q", {"visibility_timeout": 11})  # made in this process
    reads.release.set()
    await slow
    assert there.queue("q").settings.visibility_timeout == 11


async def test_a_whole_reload_keeps_what_a_later_read_took(store: LmdbBackend) -> None:
    told = _Told()
    here, there = Catalog(store, on_change=told), Catalog(store)
    await here.create_queue("q")
    started, release = _hold_next_scan(store)
    whole = asyncio.create_task(there.reload())
    await started.wait()
    await here.create_queue("r")
    await here.delete_queue("q")
    for news in told.news[-2:]:
        await there.refresh(news)
    release.set()
    await whole
    assert there.queues() == ["r"]  # neither "q" put back nor "r" lost


async def test_changes_to_one_topic_at_once_all_stay(store: LmdbBackend) -> None:
    # Many clients subscribing to one topic at once (each waits for its own store
    # write): every subscription is in this process's view when its answer comes, not
    # only once a later read of the catalog brings back what an overlapping one undid.
    catalog = Catalog(store)
    await catalog.create_topic("t")
    names = [f"q{i:03d}" for i in range(64)]
    for name in names:
        await catalog.create_queue(name)
    await asyncio.gather(*(catalog.subscribe("t", name) for name in names))
    assert sorted(catalog.topic("t").subscriptions) == names
    await asyncio.gather(*(catalog.unsubscribe("t", name) for name in names[::2]))
    assert sorted(catalog.topic("t").subscriptions) == names[1::2]


async def test_changes_to_one_queue_at_once_all_stay_and_none_undoes_a_delete(
    store: LmdbBackend,
) -> None:
    catalog = Catalog(store)
    await catalog.create_queue("q")
    await asyncio.gather(
        catalog.configure_queue("q", {"visibility_timeout": 7}),
        catalog.configure_queue("q", {"delay_seconds": 3}),
    )
    for seen in (catalog, Catalog(store)):
        await seen.reload()
        settings = seen.queue("q").settings
        assert (settings.visibility_timeout, settings.delay_seconds) == (7, 3)
    # A change that read the record before a delete wrote: it must not put it back
    deleted, configured = await asyncio.gather(
        catalog.delete_queue("q"),
        catalog.configure_queue("q", {"visibility_timeout": 9}),
        return_exceptions=True,
    )
    assert isinstance(deleted, str) and isinstance(configured, QueueNotFound)
    assert await store.meta_get("q/q") is None
    await catalog.reload()
    assert catalog.find("q") is None
