"""When a long poll wakes for a delayed message, in fake time that jumps.

A jumping ``FakeClock`` runs the long poll's waits in fake time: a wait
nothing wakes moves the clock by its length. A message received at
``clock.now()`` was handed out exactly that late, so these tests measure
lateness without a timed assertion.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.ids import STRIPES, IdGenerator
from dynamiq.core.queues import QueueService
from dynamiq.models import Outgoing, QueueSettings
from dynamiq.storage.lmdb import LmdbBackend

# A message is due at a whole microsecond of the clock: it may come up to half
# a microsecond early (the fake clock rounds too), and never a millisecond late.
EARLY = 0.5e-6 + 1e-9
ON_TIME = 0.001


class Stripes(random.Random):
    """Draws the stripes it is given, in turn, where ids are made; then any
    (a publisher whose ids were taken draws again)."""

    def __init__(self, stripes: list[int]) -> None:
        super().__init__(0)
        self._stripes = iter(stripes)

    def randint(self, a: int, b: int) -> int:
        stripe = next(self._stripes, None)
        if stripe is None:
            return super().randint(a, b)
        assert a <= stripe <= b
        return stripe


async def _engine(
    store: LmdbBackend, clock: FakeClock, stripes: list[int], partitions: int
) -> QueueService:
    catalog = Catalog(store)
    await catalog.create_queue(
        "q", QueueSettings(min_partitions=partitions, max_partitions=partitions)
    )
    return QueueService(store, catalog, clock, IdGenerator(clock.wall_us, Stripes(stripes)))


async def test_a_long_poll_wakes_for_a_delayed_message_in_a_partition_it_skipped(
    store: LmdbBackend,
) -> None:
    """The sequence that once stalled: the queue's next due time passes and a
    receive serves the partition it was for; another partition, skipped under
    an empty hint that ends at its own message's due time, must still wake the
    next long poll then, not a whole empty hint later."""
    clock = FakeClock(jumps=True)
    queues = await _engine(store, clock, [0, STRIPES - 1], partitions=2)
    start = clock.now()
    await queues.publish("q", [Outgoing(b"early", delay_seconds=0.1)])
    await queues.publish("q", [Outgoing(b"late", delay_seconds=0.3)])
    assert await queues.receive("q", 10) == []  # each partition: empty until its message
    got = await queues.receive("q", 10, wait_seconds=5)
    assert [m.body for m in got] == [b"early"]
    assert abs(clock.now() - start - 0.1) < ON_TIME
    got = await queues.receive("q", 10, wait_seconds=5)
    assert [m.body for m in got] == [b"late"]
    assert abs(clock.now() - start - 0.3) < ON_TIME


@settings(max_examples=60, deadline=None)
@given(
    # unique: two messages of one stripe due the same microsecond would draw
    # the same id, and the publisher would draw a stripe again
    st.lists(
        st.tuples(st.integers(0, STRIPES - 1), st.integers(1, 3000)),
        min_size=1,
        max_size=12,
        unique=True,
    ),
    st.integers(1, 4),
    st.integers(1, 3),
)
def test_a_long_polling_consumer_gets_each_delayed_message_when_it_comes_due(
    plan: list[tuple[int, int]], partitions: int, batch: int
) -> None:
    """Delays up to 3 s (longer than an empty hint) over 1-4 partitions: each
    message is handed out at its due time, however the others lie."""

    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            store = LmdbBackend(Path(tmp), map_size=1 << 26)
            try:
                clock = FakeClock(jumps=True)
                queues = await _engine(store, clock, [s for s, _ in plan], partitions)
                start = clock.now()
                due: dict[bytes, float] = {}
                for i, (_, delay_ms) in enumerate(plan):
                    body = b"m%d" % i
                    await queues.publish("q", [Outgoing(body, delay_seconds=delay_ms / 1000)])
                    due[body] = start + delay_ms / 1000
                while due:
                    got = await queues.receive("q", batch, wait_seconds=10)
                    assert got, f"nothing came within 10 s; waiting: {sorted(due.values())}"
                    for m in got:
                        late = clock.now() - due.pop(m.body)
                        assert -EARLY <= late < ON_TIME, f"{m.body!r} came {late:.7f} s late"
                    await queues.delete("q", [m.id for m in got])
            finally:
                await store.close()

    asyncio.run(main())
