"""A wide fan-out on one node: a topic with thousands of subscribed queues, each
publish of one message a copy in every one of them.

    python -m bench.fanout [--width 10000] [--publishes 100] [--redis-cluster]

One node (embedded LMDB, or with ``--redis-cluster`` a 6-node Redis Cluster it
starts; the workers ``core.workers = auto`` picks unless ``--workers`` says).
``--width`` queues are created and subscribed to one topic; then one client
publishes one message to the topic ``--publishes`` times, one after the other.
Reported: how fast the subscriptions were made (by tenth); the time per
publish (p50, p99, worst; from the client's call to its answer); and copies a
second, from the first publish until every copy is in its queue (the store's
count of every message, ``GET /v2/stats``, says so: a message for more than
``limits.syncfanout`` queues is copied behind its answer), and the node's CPU
per copy. ``bench.queues`` runs the same with fewer publishes beside its other
figures.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from bench.many import spread, tenant
from bench.node import node_options, on_a_node
from bench.options import options
from bench.procs import cpu_seconds
from dynamiq.client import AsyncClient

__all__ = ["wide_fanout"]


async def wide_fanout(
    client: AsyncClient, pid: int, width: int, clients: int, publishes: int
) -> None:
    """A topic every one of the first ``width`` queues (``tenant``) is subscribed to:
    print the time of each publish of one message (a copy in each) to its answer,
    copies a second until every copy is in its queue, and the CPU the node (``pid``,
    its workers summed) spent per copy meanwhile."""
    await client.create_topic("broadcast")
    rates = await spread(width, clients, lambda i: client.subscribe("broadcast", tenant(i)))
    by_tenth = " ".join(f"{rate:,.0f}" for rate in rates)
    print(f"{width:,} subscriptions made, a second by tenth: {by_tenth}")
    stored = await _depth(client)
    await client.publish_topic("broadcast", [b"warm-up"])
    await _until_stored(client, stored + width)
    took = []
    cpu = cpu_seconds(pid)
    first = time.perf_counter()
    for i in range(publishes):
        began = time.perf_counter()
        await client.publish_topic("broadcast", [f"news {i}".encode()])
        took.append(time.perf_counter() - began)
    answered = time.perf_counter() - first
    await _until_stored(client, stored + width * (publishes + 1))
    landed = time.perf_counter() - first
    cpu = cpu_seconds(pid) - cpu
    took.sort()
    p50, p99 = statistics.median(took), took[max(0, round(len(took) * 0.99) - 1)]
    copies = width * publishes
    print(f"a topic with {width:,} subscribed queues: {publishes} publishes of one message")
    print(
        f"  answered in p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms,"
        f" worst {took[-1] * 1000:.0f} ms; all answered in {answered:.2f} s"
    )
    print(
        f"  every copy in its queue {landed:.2f} s after the first publish:"
        f" {copies / landed:,.0f} copies a second"
    )
    print(f"  the node's CPU meanwhile: {cpu / copies * 1e6:.1f} µs a copy")
    await client.delete_topic("broadcast")


async def _depth(client: AsyncClient) -> int:
    """Every message the node's store holds (a wide fan-out not copied yet counts one)."""
    depth: int = (await client.stats_page(1))["totals"]["depth"]
    return depth


async def _until_stored(client: AsyncClient, depth: int) -> None:
    """Wait until the store holds ``depth`` messages: every copy made (polled: the count
    is the node's, no event tells the bench of it)."""
    while (await _depth(client)) != depth:  # noqa: ASYNC110 - a count over HTTP
        await asyncio.sleep(0.05)


async def _run(url: str, pid: int, width: int, clients: int, publishes: int) -> None:
    async with AsyncClient(url, timeout=300) as client:
        await spread(width, clients, lambda i: client.create_queue(tenant(i)))
        await wide_fanout(client, pid, width, clients, publishes)


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--width", type=int, default=10_000, help="queues subscribed")
    parser.add_argument("--publishes", type=int, default=100)
    parser.add_argument("--clients", type=int, default=16, help="to create and subscribe")
    node_options(parser)
    args = parser.parse_args()
    on_a_node(args, lambda url, pid: _run(url, pid, args.width, args.clients, args.publishes))


if __name__ == "__main__":
    main()
