"""W1 with the message lifecycle beside plain W1, and how late delayed messages come.

    python -m bench.lifecycle [--n 20000] [--rate 2000] [--seconds 10]

One node (embedded LMDB, fsync per group commit), one run, three phases
through the v2 API with the project's asyncio client:

1. ``plain``: W1's shape on a queue without lifecycle settings: 1 KB bodies
   published in batches of 100 (two in flight) while a consumer long-polls
   batches of 100 and deletes every message; end-to-end msg/s.
2. ``lifecycle``: the same on a queue with ``max_receives: 3`` and a
   dead-letter queue, where 10% of the messages are never deleted and 10% are
   published with a 1 s delay; end-to-end msg/s counts the messages deleted
   (until every deletable one is), then the run waits for every undeleted one
   to reach the dead-letter queue (a lease of 1 s, three receives) and checks
   that each is there exactly once (a consumer goes on receiving them,
   without deleting, until then).
3. ``lateness``: messages published at ``--rate`` msg/s for ``--seconds``
   seconds with a 1 s delay each, received by long polls; how long after its
   due time each one arrived (p50, p99, max).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass

from bench.node import on_one_node
from bench.options import options
from dynamiq.client import AsyncClient
from dynamiq.models import Outgoing

BODY = b"x" * 1024
BATCH = 100


@dataclass
class Phase:
    """What one phase measured."""

    name: str
    deleted: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.deleted / self.seconds if self.seconds else 0.0


def _message(i: int, share_poison: float, share_delayed: float) -> Outgoing:
    """Every 1/share-th message is poison (never deleted) or delayed by 1 s."""
    poison = share_poison and i % round(1 / share_poison) == 0
    delayed = share_delayed and i % round(1 / share_delayed) == 1
    body = (b"poison-%d-" % i if poison else b"ok-%d-" % i) + BODY
    return Outgoing(body, delay_seconds=1.0 if delayed else None)


async def _publish(client: AsyncClient, queue: str, messages: list[Outgoing]) -> None:
    batches = [messages[i : i + BATCH] for i in range(0, len(messages), BATCH)]
    window = asyncio.Semaphore(2)

    async def one(batch: list[Outgoing]) -> None:
        async with window:
            await client.publish(queue, batch)

    await asyncio.gather(*(one(b) for b in batches))


async def _consume(client: AsyncClient, queue: str, want: int) -> int:
    """Receive and delete all but poison until ``want`` messages were deleted."""
    deleted = 0
    pending: set[asyncio.Task[list[int]]] = set()
    while deleted < want:
        got = await client.receive(queue, BATCH, wait_seconds=1.0, visibility_timeout=1.0)
        done = [m.id for m in got if not m.body.startswith(b"poison-")]
        if done:
            pending.add(asyncio.create_task(client.delete(queue, done)))
            deleted += len(done)
        if len(pending) >= 4:
            finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in finished:
                task.result()
    await asyncio.gather(*pending)
    return deleted


async def _phase(
    client: AsyncClient, name: str, queue: str, n: int, poison: float, delayed: float
) -> Phase:
    messages = [_message(i, poison, delayed) for i in range(n)]
    want = sum(1 for m in messages if not m.body.startswith(b"poison-"))
    started = time.perf_counter()
    deleted, _ = await asyncio.gather(
        _consume(client, queue, want), _publish(client, queue, messages)
    )
    return Phase(name, deleted, time.perf_counter() - started)


async def _dead_lettered(
    client: AsyncClient, source: str, queue: str, expect: int
) -> tuple[float, int]:
    """Keep receiving ``source`` without deleting until ``queue`` holds ``expect``
    messages; return the wait and the distinct bodies there."""
    started = time.perf_counter()
    while (await client.queue(queue))["stats"]["depth"] < expect:
        if time.perf_counter() - started > 120:
            break
        await client.receive(source, BATCH, wait_seconds=0.5, visibility_timeout=1.0)
    waited = time.perf_counter() - started
    bodies: set[bytes] = set()
    while got := await client.receive(queue, BATCH, visibility_timeout=600):
        bodies.update(m.body for m in got)
    return waited, len(bodies)


async def _lateness(client: AsyncClient, rate: float, seconds: float) -> list[float]:
    """Publish delayed messages at ``rate``; return each one's lateness in ms."""
    await client.create_queue("late")
    total = int(rate * seconds)
    late: list[float] = []

    async def produce() -> None:
        per_tick = max(1, int(rate / 100))  # a batch every 10 ms
        start = time.time()
        for sent in range(0, total, per_tick):
            await client.publish("late", [b"later"] * per_tick, delay_seconds=1.0)
            pause = start + (sent + per_tick) / rate - time.time()
            if pause > 0:
                await asyncio.sleep(pause)

    async def consume() -> None:
        while len(late) < total:
            got = await client.receive("late", BATCH, wait_seconds=2.0)
            now_ms = time.time() * 1000
            late.extend(now_ms - (m.published_ms + 1000) for m in got)  # due 1 s after publish
            if got:
                await client.delete("late", [m.id for m in got])

    await asyncio.gather(produce(), consume())
    return sorted(late)


def _pct(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(p / 100 * len(values)))] if values else 0.0


async def _run(url: str, args: argparse.Namespace) -> int:
    async with AsyncClient(url, timeout=120) as client:
        await client.create_queue("plain")
        await client.create_queue("life-dead")
        await client.create_queue(
            "life", max_receives=3, dead_letter_queue="life-dead", visibility_timeout=1.0
        )
        plain = await _phase(client, "plain W1", "plain", args.n, 0.0, 0.0)
        life = await _phase(client, "lifecycle W1", "life", args.n, 0.1, 0.1)
        poison = sum(1 for i in range(args.n) if _message(i, 0.1, 0.1).body.startswith(b"poison"))
        waited, dead = await _dead_lettered(client, "life", "life-dead", poison)
        late = await _lateness(client, args.rate, args.seconds)
    print(f"W1 shape: n={args.n}, 1 KB bodies, batches of {BATCH}")
    for phase in (plain, life):
        print(f"  {phase.name:<14} e2e {phase.rate:>9,.0f} msg/s  ({phase.deleted} deleted)")
    print(f"  lifecycle / plain   {life.rate / plain.rate:.2f}x")
    print(
        f"  dead-lettered       {dead} of {poison} never-deleted messages, "
        f"all there {waited:.1f} s after the last delete (three 1 s leases each)"
    )
    print(
        f"delayed 1 s at {args.rate:,.0f} msg/s for {args.seconds:g} s: lateness past due "
        f"p50 {_pct(late, 50):.1f} ms, p99 {_pct(late, 99):.1f} ms, max {late[-1]:.1f} ms"
        f" ({len(late)} messages)"
    )
    return 0 if dead == poison else 1


def main() -> int:
    ap = options(__doc__, n=20_000, rate=2000.0, seconds=10.0)
    args = ap.parse_args()
    return on_one_node(lambda url: _run(url, args))


if __name__ == "__main__":
    sys.exit(main())
