"""Many queues on a cluster: a million queues over three nodes on this machine.

    python -m bench.queues_cluster [--queues 1000000] [--nodes 3] [--clients 16]

Also run by ``python -m bench.queues`` after its one-node part. Each node
(one worker each: three nodes already share this machine's cores) runs on
the same LMDB directory with default settings. Measured:

- **creation**: ``--queues`` empty queues made through every node in turn by
  ``--clients`` concurrent clients; creates a second in each tenth;
- **memory**: each node's anonymous memory before and after, and per queue;
- **propagation**: a queue created through one node, published to through
  another at once (again every millisecond until it is known there): how long
  until the other node took it, over 20 tries;
- **joining**: the last node stopped (SIGTERM) and started again: the seconds
  until it serves and until the cluster agrees again, its memory after, and a
  queue created before it left used through it.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from bench.many import spread, tenant, tenths
from bench.options import options
from bench.procs import memory_mib
from dynamiq.client import AsyncClient
from dynamiq.errors import DynamiqError
from dynamiq.testing.cluster import LocalCluster, LocalNode

TRIES = 20


def _anon(node: LocalNode) -> float:
    assert node.proc is not None
    return memory_mib(node.proc.pid, "RssAnon")


async def _propagation(first: AsyncClient, other: AsyncClient) -> list[float]:
    """Seconds from a create's answer through ``first`` to a publish through
    ``other`` taken, per try."""
    took = []
    for i in range(TRIES):
        name = f"probe-{i:03d}"
        await first.create_queue(name)
        created = time.perf_counter()
        while True:
            try:
                await other.publish(name, [b"here"])
                break
            except DynamiqError:
                await asyncio.sleep(0.001)
        took.append(time.perf_counter() - created)
    return sorted(took)


async def _creates(nodes: list[LocalNode], queues: int, clients: int) -> None:
    """Create the queues through every node in turn; print the rates and memory."""
    before = {n.name: _anon(n) for n in nodes}
    handles = [AsyncClient(n.url, timeout=300) for n in nodes]
    try:
        created = await spread(
            queues, clients, lambda i: handles[i % len(handles)].create_queue(tenant(i))
        )
        print(f"{queues:,} queues created through {len(nodes)} nodes: creates/s by tenth")
        print(f"  {tenths(created)}")
        await asyncio.sleep(5)
        for node in nodes:
            after = _anon(node)
            per_queue = (after - before[node.name]) * 1024 * 1024 / queues
            print(
                f"{node.name}: anonymous memory {before[node.name]:.0f} MB before,"
                f" {after:,.0f} MB after: {per_queue:,.0f} bytes a queue"
            )
        took = await _propagation(handles[0], handles[-1])
        print(
            f"created through {nodes[0].name}, taken by {nodes[-1].name}: median"
            f" {statistics.median(took) * 1000:.1f} ms, worst of {TRIES}"
            f" {took[-1] * 1000:.1f} ms"
        )
    finally:
        for handle in handles:
            await handle.close()


async def _serves(node: LocalNode, queue: str) -> None:
    """Publish to and receive from ``queue`` through ``node``."""
    async with AsyncClient(node.url, timeout=60) as client:
        await client.publish(queue, [b"after the join"])
        got = await client.receive(queue, max_messages=1, wait_seconds=5)
        assert got, f"{queue} gave nothing through {node.name}"
        await client.delete(queue, [m.id for m in got])


def run(queues: int, nodes: int, clients: int) -> None:
    """The cluster part: ``nodes`` nodes holding ``queues`` queues."""
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(Path(tmp), nodes=nodes, workers=1)
        try:
            cluster.start()
            members = list(cluster.nodes.values())
            asyncio.run(_creates(members, queues, clients))
            last = members[-1]
            last.stop()
            cluster.wait_converged(60, [n.name for n in members[:-1]])
            began = time.monotonic()
            last.start_seconds = 600  # it reads the catalog first
            cluster.start_node(last.name)
            serving = time.monotonic() - began
            converged = cluster.wait_converged(120) + serving
            asyncio.run(_serves(last, tenant(queues - 1)))
            print(
                f"{last.name} stopped and started again beside {queues:,} queues: serving after"
                f" {serving:.1f} s, the cluster agreeing after {converged:.1f} s;"
                f" anonymous memory then {_anon(last):,.0f} MB"
            )
        finally:
            cluster.stop()


def main() -> None:
    parser = options(__doc__, queues=1_000_000, nodes=3, clients=16)
    args = parser.parse_args()
    run(args.queues, args.nodes, args.clients)


if __name__ == "__main__":
    main()
