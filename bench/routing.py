"""Topic publish throughput with 1,000 subscriptions beside 10, in one run.

    python -m bench.routing [--n 20000] [--rounds 3]

One node (embedded LMDB, fsync per group commit). Two topics, ``few`` with 10
subscriptions and ``many`` with 1,000, each subscription its own queue with
the pattern ``orders.<i>.*``. Every message (1 KB, batches of 100, two
batches in flight) has a routing key that one of the first 10 subscriptions
takes, so both topics store one copy per message into the same number of
queues and differ only in what routing costs. Rounds alternate between the
topics (this machine's speed drifts between minutes); each topic's rate is
its total over its rounds.

The same again with filters: topics with 10 and 1,000 subscriptions whose
pattern is ``#`` and whose filter asks for one ``tenant`` value each;
messages carry one of the first 10 tenants.
"""

from __future__ import annotations

import asyncio
import sys
import time

from bench.node import on_one_node
from bench.options import options
from dynamiq.client import AsyncClient
from dynamiq.models import Outgoing

BODY = b"x" * 1024
BATCH = 100


async def _topic(client: AsyncClient, name: str, count: int, filtered: bool) -> None:
    await client.create_topic(name)
    for i in range(count):
        queue = f"{name}-{i}"
        await client.create_queue(queue)
        if filtered:
            await client.subscribe(name, queue, pattern="#", filter_policy={"tenant": [f"t{i}"]})
        else:
            await client.subscribe(name, queue, pattern=f"orders.{i}.*")


def _messages(n: int, filtered: bool) -> list[Outgoing]:
    if filtered:
        return [
            Outgoing(BODY, routing_key="orders", attributes={"tenant": f"t{i % 10}"})
            for i in range(n)
        ]
    return [Outgoing(BODY, routing_key=f"orders.{i % 10}.created") for i in range(n)]


async def _publish(client: AsyncClient, topic: str, messages: list[Outgoing]) -> float:
    """Publish every message; return the seconds it took."""
    window = asyncio.Semaphore(2)

    async def one(batch: list[Outgoing]) -> None:
        async with window:
            ids = await client.publish_topic(topic, batch)
            if sum(1 for copies in ids.values() for i in copies if i is not None) != len(batch):
                raise RuntimeError(f"{topic}: a message was not routed to exactly one queue")

    started = time.perf_counter()
    await asyncio.gather(*(one(messages[i : i + BATCH]) for i in range(0, len(messages), BATCH)))
    return time.perf_counter() - started


async def _run(url: str, n: int, rounds: int) -> None:
    variants = {
        "patterns-10": (10, False),
        "patterns-1000": (1000, False),
        "filters-10": (10, True),
        "filters-1000": (1000, True),
    }
    async with AsyncClient(url, timeout=120) as client:
        for name, (count, filtered) in variants.items():
            await _topic(client, name, count, filtered)
        seconds = dict.fromkeys(variants, 0.0)
        for _ in range(rounds):
            for name, (_, filtered) in variants.items():
                seconds[name] += await _publish(client, name, _messages(n, filtered))
    rate = {name: n * rounds / s for name, s in seconds.items()}
    print(f"topic publish, n={n} x {rounds} rounds, 1 KB bodies, batches of {BATCH}")
    for kind in ("patterns", "filters"):
        few, many = rate[f"{kind}-10"], rate[f"{kind}-1000"]
        print(f"  {kind:<8}    10 subscriptions {few:>9,.0f} msg/s")
        print(f"  {kind:<8} 1,000 subscriptions {many:>9,.0f} msg/s   {many / few:.2f}x")


def main() -> int:
    ap = options(__doc__, n=20_000, rounds=3)
    args = ap.parse_args()
    on_one_node(lambda url: _run(url, args.n, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
