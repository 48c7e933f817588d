"""Many queues on one node: what each idle queue costs, and whether busy ones notice.

    python -m bench.queues [--queues 100000] [--clients 16] [--fanout 10000] [--workers N]
    python -m bench.queues --queues 10000 --redis-cluster   # the node on a Redis Cluster

One node (embedded LMDB, or with ``--redis-cluster`` a 6-node Redis Cluster it
starts; default settings: the workers ``core.workers = auto`` picks, unless
``--workers`` says)
measured in one run:

- **a busy queue alone**: publish, receive and delete one message at a time
  on one queue (``--trips`` round trips): p50 and p99 of the round trip;
- **creation**: ``--queues`` empty queues made by ``--clients`` concurrent
  clients; creates a second in each tenth of the run (flat, or falling as the
  catalog grows);
- **idle**: the node's anonymous memory (its processes summed) per queue
  created, its CPU while nobody calls it (with one queue, then beside them:
  right after they were made, and a minute later);
- **reading**: ``GET /v2/stats`` (a page), every page of ``GET /v2/queues``, a
  ``/metrics`` scrape (its size and time);
- **the busy queue beside the idle ones**: the same round trips again, and
  their ratio to the first;
- **wide fan-out**: a topic with ``--fanout`` of the queues subscribed, each
  publish of one message a copy in every one of them (one commit): time per
  publish and copies a second;
- **deletion**: every queue deleted by the same clients; deletes a second in
  each tenth;
- then, unless ``--cluster-queues 0``, a 3-node cluster holding a million
  queues (``bench.queues_cluster``).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from bench.fanout import wide_fanout
from bench.many import spread, tenant, tenths
from bench.node import node_options, on_a_node
from bench.options import options
from bench.procs import cpu_seconds, memory_mib
from bench.queues_cluster import run as run_cluster
from dynamiq.client import AsyncClient

BUSY = "busy"


async def _round_trips(client: AsyncClient, trips: int) -> tuple[float, float]:
    """p50 and p99 (ms) of publish, receive and delete of one message on ``BUSY``."""
    took = []
    for i in range(trips):
        began = time.perf_counter()
        await client.publish(BUSY, [f"m{i}".encode()])
        got = await client.receive(BUSY, max_messages=1, wait_seconds=1)
        await client.delete(BUSY, [m.id for m in got])
        took.append((time.perf_counter() - began) * 1000)
    took.sort()
    return statistics.median(took), took[int(len(took) * 0.99) - 1]


async def _timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    began = time.perf_counter()
    result = await call()
    return (time.perf_counter() - began) * 1000, result


async def _scrape(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as answer:
        return await answer.text()


async def _run(url: str, pid: int, queues: int, clients: int, trips: int, fanout: int) -> None:
    async with AsyncClient(url, timeout=300) as client:
        await client.create_queue(BUSY)
        await _round_trips(client, 100)  # warm-up
        alone = await _round_trips(client, trips)
        print(f"busy queue alone: round trip p50 {alone[0]:.2f} ms, p99 {alone[1]:.2f} ms")

        cpu = cpu_seconds(pid)
        await asyncio.sleep(10)
        print(f"idle CPU with one queue: {(cpu_seconds(pid) - cpu) / 10 * 100:.1f}% of a core")
        anon_before = memory_mib(pid, "RssAnon")
        created = await spread(queues, clients, lambda i: client.create_queue(tenant(i)))
        print(f"{queues:,} queues created by {clients} clients: creates/s by tenth")
        print(f"  {tenths(created)}")
        await asyncio.sleep(5)  # what creation left to settle
        anon = memory_mib(pid, "RssAnon")
        per_queue = (anon - anon_before) * 1024 * 1024 / queues
        print(f"anonymous memory: {anon_before:.0f} MB before, {anon:.0f} MB after")
        print(f"  {per_queue:,.0f} bytes per idle queue")
        for when in ("right after", "a minute later"):
            if when != "right after":
                await asyncio.sleep(50)
            cpu = cpu_seconds(pid)
            await asyncio.sleep(10)
            used = (cpu_seconds(pid) - cpu) / 10 * 100
            print(f"idle CPU beside them, {when}: {used:.1f}% of a core")

        stats_ms = sorted([(await _timed(client.stats_page))[0] for _ in range(3)])
        print(f"GET /v2/stats (a page of 100 and their sums): {stats_ms[1]:.0f} ms (median of 3)")
        listed_ms, names = await _timed(lambda: client.queues(page_size=1000))
        pages = -(-len(names) // 1000)
        print(f"GET /v2/queues: {len(names):,} names in {pages} pages, {listed_ms:.0f} ms")
        scrape_ms, text = await _timed(lambda: _scrape(url))
        series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        print(f"/metrics: {len(text) / 1024:,.0f} KiB, {series:,} series, {scrape_ms:.0f} ms")

        beside = await _round_trips(client, trips)
        print(
            f"busy queue beside {queues:,} idle: p50 {beside[0]:.2f} ms, p99 {beside[1]:.2f} ms"
            f" ({beside[0] / alone[0]:.2f}x, {beside[1] / alone[1]:.2f}x alone)"
        )

        if fanout:
            await wide_fanout(client, pid, min(fanout, queues), clients, publishes=20)
        deleted = await spread(queues, clients, lambda i: client.delete_queue(tenant(i)))
        print(f"{queues:,} queues deleted: deletes/s by tenth")
        print(f"  {tenths(deleted)}")


def main() -> None:
    parser = options(__doc__, queues=100_000, clients=16)
    parser.add_argument("--trips", type=int, default=2000, help="round trips on the busy queue")
    parser.add_argument(
        "--fanout", type=int, default=10_000, help="queues subscribed to one topic (0: none)"
    )
    node_options(parser)
    parser.add_argument(
        "--cluster-queues",
        type=int,
        default=1_000_000,
        help="then queues on a 3-node cluster (0: none)",
    )
    args = parser.parse_args()
    on_a_node(
        args,
        lambda url, pid: _run(url, pid, args.queues, args.clients, args.trips, args.fanout),
    )
    if args.cluster_queues:
        run_cluster(args.cluster_queues, nodes=3, clients=args.clients)


if __name__ == "__main__":
    main()
