"""A wide fan-out on one node: a topic with thousands of subscribed queues, each
publish of one message a copy in every one of them, in one commit.

    python -m bench.fanout [--width 10000] [--publishes 100] [--redis-cluster]

One node (embedded LMDB, or with ``--redis-cluster`` a 6-node Redis Cluster it
starts; the workers ``core.workers = auto`` picks unless ``--workers`` says).
``--width`` queues are created and subscribed to one topic; then one client
publishes one message to the topic ``--publishes`` times, one after the other.
Reported: how fast the subscriptions were made (by tenth); the time per
publish (p50, p99, worst; from the client's call to its answer) and copies a
second at the p50. ``bench.queues`` runs the same with fewer publishes beside
its other figures.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.many import spread, tenant
from bench.node import node_options, on_a_node
from dynamiq.client import AsyncClient

__all__ = ["wide_fanout"]


async def wide_fanout(client: AsyncClient, width: int, clients: int, publishes: int) -> None:
    """A topic every one of the first ``width`` queues (``tenant``) is subscribed to:
    print the time of each publish of one message (a copy in each) and copies a second."""
    await client.create_topic("broadcast")
    rates = await spread(width, clients, lambda i: client.subscribe("broadcast", tenant(i)))
    by_tenth = " ".join(f"{rate:,.0f}" for rate in rates)
    print(f"{width:,} subscriptions made, a second by tenth: {by_tenth}")
    await client.publish_topic("broadcast", [b"warm-up"])
    took = []
    for i in range(publishes):
        began = time.perf_counter()
        await client.publish_topic("broadcast", [f"news {i}".encode()])
        took.append(time.perf_counter() - began)
    took.sort()
    p50, p99 = statistics.median(took), took[max(0, round(len(took) * 0.99) - 1)]
    print(f"a topic with {width:,} subscribed queues: {publishes} publishes of one message")
    print(
        f"  p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, worst {took[-1] * 1000:.0f} ms;"
        f" {width / p50:,.0f} copies a second"
    )
    await client.delete_topic("broadcast")


async def _run(url: str, width: int, clients: int, publishes: int) -> None:
    async with AsyncClient(url, timeout=300) as client:
        await spread(width, clients, lambda i: client.create_queue(tenant(i)))
        await wide_fanout(client, width, clients, publishes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=10_000, help="queues subscribed")
    parser.add_argument("--publishes", type=int, default=100)
    parser.add_argument("--clients", type=int, default=16, help="to create and subscribe")
    node_options(parser)
    args = parser.parse_args()
    on_a_node(args, lambda url, _: _run(url, args.width, args.clients, args.publishes))


if __name__ == "__main__":
    main()
