"""Receives whose store calls are slow, on a real LMDB store with a fake clock: a lease
cannot end while its receive still reads, and a count on its way to the store is
counted on from."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

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


async def _engine(store: LmdbBackend, clock: FakeClock, settings: QueueSettings) -> QueueService:
    catalog = Catalog(store)
    await catalog.create_queue("dlq")
    await catalog.create_queue("q", settings)
    return QueueService(store, catalog, clock)


def _counts(messages: list[Message]) -> list[int]:
    return [m.receive_count for m in messages]


async def test_a_lease_cannot_end_while_its_receive_reads(
    tmp_path: Path, fake_clock: FakeClock
) -> None:
    # One receive allowed, then the dead letters: a lease that ended while the
    # receive stored its count would send the message there unseen.
    store = SlowReplaces(tmp_path / "store", map_size=1 << 26)
    try:
        settings = QueueSettings(visibility_timeout=0.3, max_receives=1, dead_letter_queue="dlq")
        queues = await _engine(store, fake_clock, settings)
        await queues.publish("q", [Outgoing(b"m")])

        async def slow() -> None:  # the count's write takes a second; leases are swept
            fake_clock.advance(1.0)
            await queues.sweep()

        store.meanwhile = slow
        got = await queues.receive("q", 10)
        assert _counts(got) == [1]
        # Leased for a whole lease from when it was handed out.
        fake_clock.advance(0.2)
        await queues.sweep()
        assert await queues.receive("q", 10) == []
        assert await queues.receive("dlq", 10) == []
        assert await queues.delete("q", [got[0].id]) == [True]
    finally:
        await store.close()


async def test_a_lease_that_ends_while_read_ends_after_its_receive(
    tmp_path: Path, fake_clock: FakeClock
) -> None:
    store = SlowReplaces(tmp_path / "store", map_size=1 << 26)
    try:
        settings = QueueSettings(visibility_timeout=0.3, max_receives=1, dead_letter_queue="dlq")
        queues = await _engine(store, fake_clock, settings)
        await queues.publish("q", [Outgoing(b"m")])

        async def a_little_slow() -> None:  # past the lease, not slow enough to renew it
            fake_clock.advance(0.4)
            await queues.sweep()

        store.meanwhile = a_little_slow
        assert _counts(await queues.receive("q", 10)) == [1]
        await queues.sweep()  # its lease ended: its one receive spent, dead-lettered
        assert await queues.receive("q", 10) == []
        assert _counts(await queues.receive("dlq", 10)) == [1]
    finally:
        await store.close()


async def test_a_delivery_while_a_count_is_stored_counts_on_from_it(
    tmp_path: Path, fake_clock: FakeClock
) -> None:
    # No dead letters: counts reach the store when leases end, not at delivery.
    store = SlowReplaces(tmp_path / "store", map_size=1 << 26)
    try:
        queues = await _engine(store, fake_clock, QueueSettings(visibility_timeout=0))
        await queues.publish("q", [Outgoing(b"m")])
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
    finally:
        await store.close()
