"""Background expiry on a real LMDB store with a fake clock: retention and time to
live go without a receive, in bounded rounds, each node in its own slice."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from random import Random

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.ids import IdGenerator
from dynamiq.core.publish.hints import EXPIRY_INDEX, Hint, hint_rows
from dynamiq.core.queues import QueueService
from dynamiq.keyspace import ID_MAX, WHOLE, KeyRange
from dynamiq.models import Outgoing, QueueSettings
from dynamiq.storage.lmdb import LmdbBackend


class ScanCountingStore(LmdbBackend):
    """The LMDB store, noting the bucket of every scan."""

    scans: list[str] = []  # noqa: RUF012 (set afresh by each test)

    async def scan(
        self, bucket: str, ranges: Sequence[KeyRange], limit: int | Sequence[int]
    ) -> list[list[int]]:
        self.scans.append(bucket)
        return await super().scan(bucket, ranges, limit)


LOW: KeyRange = (0, ID_MAX // 2)
HIGH: KeyRange = (ID_MAX // 2 + 1, ID_MAX)


async def _engine(
    store: LmdbBackend,
    clock: FakeClock,
    keyspace: KeyRange = WHOLE,
    ids: IdGenerator | None = None,
    **settings: object,
) -> tuple[QueueService, str]:
    """An engine over ``keyspace``, queue ``q`` (and ``dlq``) made; and ``q``'s bucket."""
    catalog = Catalog(store)
    await catalog.reload()
    if catalog.find("q") is None:
        await catalog.create_queue("dlq")
        await catalog.create_queue("q", QueueSettings().updated(dict(settings)))
    return QueueService(store, catalog, clock, ids, keyspace), catalog.queue("q").uid


async def test_messages_past_their_time_to_live_go_without_a_receive(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues, _ = await _engine(store, fake_clock)
    await queues.publish(
        "q", [Outgoing(b"a", ttl_seconds=5), b"kept", Outgoing(b"b", ttl_seconds=60)]
    )
    (deleted,) = await queues.publish("q", [Outgoing(b"deleted first", ttl_seconds=5)])
    await queues.delete("q", [deleted])
    assert await store.count(EXPIRY_INDEX) == 3
    assert await queues.expire_due() == 0  # nothing is due yet: nothing read, nothing gone
    fake_clock.advance(5.002)  # a hint may come due up to a millisecond after its message
    assert await queues.expire_due() == 1
    assert [m.body for m in await queues.peek_many("q", 10)] == [b"kept", b"b"]
    assert await store.count(EXPIRY_INDEX) == 1  # the deleted message's hint went too
    fake_clock.advance(55)
    assert await queues.expire_due() == 1
    assert [m.body for m in await queues.peek_many("q", 10)] == [b"kept"]
    assert await store.count(EXPIRY_INDEX) == 0
    assert (await queues.stats("q", detailed=True)).here.expired == 2


async def test_a_round_removes_at_most_its_budget(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues, _ = await _engine(store, fake_clock, retention_seconds=60)
    await queues.publish("q", [Outgoing(b"t", ttl_seconds=1)] * 30 + [b"r"] * 30)
    fake_clock.advance(61)
    assert [await queues.expire_due(budget=25) for _ in range(4)] == [25, 25, 10, 0]
    assert (await queues.stats("q")).depth == 0


async def test_retention_goes_in_the_background_and_into_the_dead_letter_queue_when_asked(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues, _ = await _engine(
        store,
        fake_clock,
        retention_seconds=60,
        max_receives=5,
        dead_letter_queue="dlq",
        dead_letter_on_expiry=True,
    )
    await queues.publish("q", [b"old", Outgoing(b"brief", ttl_seconds=10)])
    fake_clock.advance(30)
    await queues.publish("q", [b"young"])
    fake_clock.advance(30)
    assert await queues.expire_due() == 2
    assert [m.body for m in await queues.peek_many("q", 10)] == [b"young"]
    dead = await queues.peek_many("dlq", 10)
    assert sorted(m.body for m in dead) == [b"brief", b"old"]
    assert {m.dead_letter.reason for m in dead if m.dead_letter} == {"expired"}
    assert all(m.expires_ms == 0 for m in dead)  # the dead-letter queue keeps them


async def test_each_node_expires_its_own_slice(store: LmdbBackend, fake_clock: FakeClock) -> None:
    low, _ = await _engine(store, fake_clock, LOW)
    high, _ = await _engine(store, fake_clock, HIGH)
    await low.publish("q", [Outgoing(b"low", ttl_seconds=1)])
    await high.publish("q", [Outgoing(b"high", ttl_seconds=1)])
    fake_clock.advance(1.002)
    assert await low.expire_due() == 1
    assert [m.body for m in await low.peek_many("q", 10)] == [b"high"]
    assert await high.expire_due() == 1
    assert await low.peek_many("q", 10) == []


async def test_a_hint_whose_key_is_taken_is_stored_a_microsecond_later(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues, uid = await _engine(store, fake_clock, ids=IdGenerator(fake_clock.wall_us, Random(7)))
    # The id the publish will draw, from a twin generator; another message's hint
    # (same stripe, same expiry, same microseconds) holds the key its hint wants.
    (upcoming,) = IdGenerator(fake_clock.wall_us, Random(7)).many(1)
    other = Hint(uid, upcoming + 1000, fake_clock.wall_ms() + 1000)
    assert hint_rows([other])[0][1] == hint_rows([Hint(uid, upcoming, other.expires_ms)])[0][1]
    assert all(await store.insert(hint_rows([other])))
    assert await queues.publish("q", [Outgoing(b"m", ttl_seconds=1)]) == [upcoming]
    assert await store.count(EXPIRY_INDEX) == 2
    fake_clock.advance(1.002)
    assert await queues.expire_due() == 1
    assert await queues.peek_many("q", 10) == []


async def test_the_hints_of_a_purged_queue_are_dropped_unread_when_due(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues, old = await _engine(store, fake_clock)
    await queues.publish("q", [Outgoing(b"m", ttl_seconds=600)])
    catalog = Catalog(store)
    await catalog.reload()
    await catalog.purge_queue("q", drop_at_ms=0)
    for uid in await catalog.pending_drops(fake_clock.wall_ms()):
        await catalog.finish_drop(uid)
    assert await store.count(old) == 0 and await store.count(EXPIRY_INDEX) == 1
    fake_clock.advance(600.002)
    assert await queues.expire_due() == 0
    assert await store.count(EXPIRY_INDEX) == 0


async def test_a_round_costs_one_index_scan_however_many_queues_there_are(
    tmp_path: Path, fake_clock: FakeClock
) -> None:
    store = ScanCountingStore(tmp_path / "store", map_size=1 << 28)
    try:
        catalog = Catalog(store)
        for i in range(200):
            await catalog.create_queue(f"q{i}")
        await catalog.create_queue("kept", QueueSettings(retention_seconds=60))
        queues = QueueService(store, catalog, fake_clock)
        await queues.publish("q7", [Outgoing(b"brief", ttl_seconds=1)])
        fake_clock.advance(1.002)
        store.scans = []
        assert await queues.expire_due() == 1
        assert sorted(store.scans) == sorted([EXPIRY_INDEX, catalog.queue("kept").uid])
    finally:
        await store.close()
