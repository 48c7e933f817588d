"""Receives whose store calls are slow, on a real LMDB store with a fake clock: a lease
cannot end while its receive still reads, and a count on its way to the store is
counted on from."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

import pytest

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.queues import QueueService
from dynamiq.models import Message, Outgoing, QueueSettings
from dynamiq.storage.lmdb import LmdbBackend


class SlowReplaces(LmdbBackend):
    """The LMDB store; the next ``replace`` first runs ``meanwhile`` (what happens while
    a slow write is under way)."""

    meanwhile: Callable[[], Awaitable[None]] | None = None

    async def replace(self, bucket: str, items: Sequence[tuple[int, bytes]]) -> list[bool]:
        if (meanwhile := self.meanwhile) is not None:
            self.meanwhile = None
            await meanwhile()
        return await super().replace(bucket, items)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SlowReplaces]:
    slow = SlowReplaces(tmp_path / "store", map_size=1 << 26)
    try:
        yield slow
    finally:
        await slow.close()


async def _holding_one(
    store: LmdbBackend, clock: FakeClock, settings: QueueSettings
) -> QueueService:
    """Queues ``dlq`` and ``q`` (``settings``), ``q`` holding one message."""
    catalog = Catalog(store)
    await catalog.create_queue("dlq")
    await catalog.create_queue("q", settings)
    queues = QueueService(store, catalog, clock)
    await queues.publish("q", [Outgoing(b"m")])
    return queues


def _swept_after(
    queues: QueueService, clock: FakeClock, seconds: float
) -> Callable[[], Awaitable[None]]:
    """What happens during a write that takes ``seconds``: the leases are swept."""

    async def meanwhile() -> None:
        clock.advance(seconds)
        await queues.sweep()

    return meanwhile


def _counts(messages: list[Message]) -> list[int]:
    return [m.receive_count for m in messages]


# One receive allowed, then the dead letters: a lease that ended while the receive
# stored its count would send the message there unseen.
ONCE = QueueSettings(visibility_timeout=0.3, max_receives=1, dead_letter_queue="dlq")


async def test_a_lease_cannot_end_while_its_receive_reads(
    store: SlowReplaces, fake_clock: FakeClock
) -> None:
    queues = await _holding_one(store, fake_clock, ONCE)
    store.meanwhile = _swept_after(queues, fake_clock, 1.0)  # the count's write: a second
    got = await queues.receive("q", 10)
    assert _counts(got) == [1]
    # Leased for a whole lease from when it was handed out
    fake_clock.advance(0.2)
    await queues.sweep()
    assert await queues.receive("q", 10) == []
    assert await queues.receive("dlq", 10) == []
    assert await queues.delete("q", [got[0].id]) == [True]


async def test_a_lease_that_ends_while_read_ends_after_its_receive(
    store: SlowReplaces, fake_clock: FakeClock
) -> None:
    queues = await _holding_one(store, fake_clock, ONCE)
    # Past the lease, not slow enough to renew it
    store.meanwhile = _swept_after(queues, fake_clock, 0.4)
    assert _counts(await queues.receive("q", 10)) == [1]
    await queues.sweep()  # its lease ended: its one receive spent, dead-lettered
    assert await queues.receive("q", 10) == []
    assert _counts(await queues.receive("dlq", 10)) == [1]


async def test_a_delivery_while_a_count_is_stored_counts_on_from_it(
    store: SlowReplaces, fake_clock: FakeClock
) -> None:
    # No dead letters: counts reach the store when leases end, not at delivery
    queues = await _holding_one(store, fake_clock, QueueSettings(visibility_timeout=0))
    meanwhile: list[Message] = []

    async def receive() -> None:
        meanwhile.extend(await queues.receive("q", 10))

    assert _counts(await queues.receive("q", 10)) == [1]
    fake_clock.advance(0.01)
    assert _counts(await queues.receive("q", 10)) == [2]
    fake_clock.advance(0.01)
    store.meanwhile = receive  # the sweep's write of count 2 is slow: offered meanwhile
    await queues.sweep()
    assert store.meanwhile is None
    assert _counts(meanwhile) == [3]
    fake_clock.advance(0.01)
    assert _counts(await queues.receive("q", 10)) == [4]
