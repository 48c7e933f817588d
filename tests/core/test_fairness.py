"""Fair queues: a tenant holding more than its share in flight waits for the others."""

from __future__ import annotations

import random
import zlib
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.delivery.cursor import PartitionCursor
from dynamiq.core.delivery.fairness import ranks
from dynamiq.core.delivery.leases import LeaseTable
from dynamiq.core.delivery.partitions import layout
from dynamiq.core.ids import EPOCH_US, SEQ_BITS, SEQ_MASK, STRIPES, IdGenerator, seq_of, stripe_of
from dynamiq.core.queues import QueueService
from dynamiq.keyspace import ID_MAX
from dynamiq.models import Outgoing, QueueSettings
from dynamiq.storage.lmdb import LmdbBackend


def test_a_tenant_is_noisy_past_a_tenth_of_the_flight_and_thirty_messages() -> None:
    assert ranks({1: 29}, 29) == {}  # all of the flight, but fewer than 30
    assert ranks({1: 30, 2: 270}, 300) == {2: 1}  # 30 is a tenth, not more than one
    assert ranks({1: 31, 2: 269}, 300) == {1: 1, 2: 2}  # the fewest in flight first
    assert ranks(dict.fromkeys(range(100), 10), 1000) == {}  # even shares


def test_the_leases_count_what_each_stripe_holds_in_flight(fake_clock: FakeClock) -> None:
    # Given leases taken, renewed, held, released and lapsed at random
    rng = random.Random(7)
    leases = LeaseTable()
    for _ in range(2000):
        ids = [rng.randrange(4) << SEQ_BITS | rng.randrange(50) for _ in range(rng.randint(1, 5))]
        now = fake_clock.now()
        match rng.randrange(5):
            case 0 | 1:
                leases.acquire(ids, now, rng.choice([0.5, 2.0]))
            case 2:
                leases.release(ids)
            case 3:
                leases.hold(ids, now, 1.0)
            case _:
                leases.expire(now)
        fake_clock.advance(0.1)
        # Then each stripe's count is its ids leased, lapsed or not
        assert leases.by_stripe == Counter(stripe_of(mid) for mid in leases._deadline)
    leases.release_all()
    assert not leases.by_stripe


def _take(
    keys: list[int], want: int, due: int = SEQ_MASK, ranks: Mapping[int, int] = {}
) -> list[int]:
    """Take ``want`` ids by a fresh cursor over the whole keyspace, which holds ``keys``."""
    (part,) = layout(0, ID_MAX, 1)
    cursor = PartitionCursor(part, 0.0)
    cursor.take(want, (), due, ranks)
    ordered = sorted(keys)
    while wanted := cursor.requests():
        for lane, lo, hi, limit in wanted:
            cursor.feed(lane, [k for k in ordered if lo <= k <= hi][:limit])
    return cursor.result


@given(
    noisy=st.integers(1, 60), quiet=st.integers(0, 20), want=st.integers(1, 30), seed=st.integers()
)
@settings(max_examples=100, deadline=None)
def test_a_ranked_stripe_is_met_only_once_no_other_has_a_message(
    noisy: int, quiet: int, want: int, seed: int
) -> None:
    # Given a noisy tenant's older messages in one stripe and others' in three more
    rng = random.Random(seed)
    gen = IdGenerator(rng=rng)
    flood = gen.many(noisy, (9, 9))
    others = [gen.many(1, (s, s))[0] for s in rng.choices([3, 40, 200], k=quiet)]
    keys = flood + others
    # When a walk ranks the noisy stripe 1
    got = _take(keys, want, ranks={9: 1})
    # Then it takes every other message first, oldest first, and then the flood's
    assert got == (sorted(others, key=seq_of) + flood)[:want]
    # And unranked, the same walk is oldest first: the flood's come first
    assert _take(keys, want) == sorted(keys, key=seq_of)[:want]


def test_a_rank_whose_messages_are_not_due_lets_the_next_rank_through() -> None:
    # Given a quiet stripe whose only message is delayed, and a noisy one with due messages
    gen = IdGenerator()
    flood = gen.many(5, (9, 9))
    due = seq_of(flood[-1])
    later = gen.due(1, due + EPOCH_US + 10_000_000, (3, 3))
    # When a walk ranks the noisy stripe 1, the delayed message not due
    got = _take(flood + later, 10, due, {9: 1})
    # Then the noisy stripe's due messages are taken, and the delayed one is not
    assert got == flood
    # And once it is due, it comes first
    assert _take(flood + later, 10, seq_of(later[0]), {9: 1}) == later + flood


@pytest.fixture
async def fair(store: LmdbBackend, fake_clock: FakeClock) -> QueueService:
    catalog = Catalog(store)
    await catalog.create_queue("q")
    return QueueService(store, catalog, fake_clock)


async def _flood(queues: QueueService, tenant: str | None, count: int) -> list[int]:
    messages = [Outgoing(b"f%d" % i, tenant=tenant) for i in range(count)]
    return list(await queues.publish("q", messages))


@pytest.mark.parametrize("tenants", [True, False], ids=["tenants", "none"])
async def test_a_noisy_tenant_waits_while_another_has_messages(
    fair: QueueService, fake_clock: FakeClock, tenants: bool
) -> None:
    # Given one tenant's backlog of 300, and 100 of them in flight
    flood = await _flood(fair, "noisy" if tenants else None, 300)
    first = await fair.receive("q", 10)
    for _ in range(9):
        first += await fair.receive("q", 10)
    assert len(first) == 100
    # When another tenant publishes after the whole backlog
    fake_clock.advance(0.1)
    quiet = await fair.publish(
        "q", [Outgoing(b"q%d" % i, tenant="quiet" if tenants else None) for i in range(5)]
    )
    got = await fair.receive("q", 10)
    if tenants:
        # Then its messages are served first, the noisy tenant's after them
        assert [m.id for m in got[:5]] == list(quiet)
        assert {m.tenant for m in got[:5]} == {"quiet"}
        assert [m.id for m in got[5:]] == flood[100:105]
    else:
        # (Without tenants the queue is oldest first: the backlog comes first)
        assert [m.id for m in got] == flood[100:110]


async def test_a_tenant_is_served_as_any_other_once_its_share_falls(
    fair: QueueService, fake_clock: FakeClock
) -> None:
    # Given a tenant with 40 in flight, then all of them deleted
    flood = await _flood(fair, "noisy", 80)
    held = []
    for _ in range(4):
        held += await fair.receive("q", 10)
    fake_clock.advance(0.1)
    quiet = await fair.publish("q", [Outgoing(b"late", tenant="quiet")])
    await fair.delete("q", [m.id for m in held])
    fake_clock.advance(0.1)
    # When the next receive comes, the noisy tenant holds nothing in flight
    got = await fair.receive("q", 2)
    # Then its oldest message comes first again: nobody is noisy
    assert [m.id for m in got] == [flood[40], flood[41]]
    assert quiet[0] not in [m.id for m in got]


async def test_every_partition_is_looked_at_for_the_quiet_tenants_first(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    # Given a queue of four partitions, and a quiet tenant whose stripe lies in
    # another partition than the noisy tenant's
    catalog = Catalog(store)
    await catalog.create_queue("q", QueueSettings(min_partitions=4))
    queues = QueueService(store, catalog, fake_clock)
    parts = layout(0, ID_MAX, 4)

    def partition_of(tenant: str) -> int:
        stripe = zlib.crc32(tenant.encode()) % STRIPES
        return next(p.index for p in parts if p.lo >> SEQ_BITS <= stripe <= p.hi >> SEQ_BITS)

    quiet_name = next(f"t{i}" for i in range(100) if partition_of(f"t{i}") != partition_of("noisy"))
    flood = await _flood(queues, "noisy", 300)
    held = []
    for _ in range(10):
        held += await queues.receive("q", 10)
    assert {m.id for m in held} == set(flood[:100])
    # When the quiet tenant publishes, and a receive comes, whichever partition it starts at
    fake_clock.advance(0.1)
    quiet = await queues.publish("q", [Outgoing(b"q", tenant=quiet_name)])
    got = []
    for _ in range(4):
        got += await queues.receive("q", 1)
    # Then the quiet tenant's message is the first one out
    assert got[0].id == quiet[0]
