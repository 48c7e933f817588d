"""Drain a queue with Spark executors, beside a plain Python consumer, in one run.

    python -m bench.spark_drain --n 1000000

Starts a node on the embedded store, publishes ``--n`` 1 KB messages, drains
them with a plain asyncio consumer (``--receivers`` receives of 100 in
flight, one delete per batch), publishes them again, and drains them with
``dynamiq.spark.process`` on ``local[2]`` (a no-op function: the figure is
the connector's, not the job's). Prints messages per second for both.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from bench.options import options
from dynamiq.client import AsyncClient
from dynamiq.models import Message
from dynamiq.testing.cluster import LocalNode

BODY = "x" * 1024


async def publish(url: str, queue: str, n: int) -> float:
    """Publish ``n`` messages in batches of 500, 4 requests in flight; return seconds."""
    start = time.perf_counter()
    async with AsyncClient(url) as client:
        slots = asyncio.Semaphore(4)

        async def one(count: int) -> None:
            async with slots:
                await client.publish(queue, [BODY] * count)

        await asyncio.gather(*(one(min(500, n - i)) for i in range(0, n, 500)))
    return time.perf_counter() - start


async def python_drain(url: str, queue: str, n: int, receivers: int, batch: int) -> float:
    """Receive ``batch`` and delete them, ``receivers`` loops at once, until ``n`` are gone."""
    done = 0
    start = time.perf_counter()
    async with AsyncClient(url) as client:

        async def loop() -> None:
            nonlocal done
            while done < n:
                got = await client.receive(queue, batch, wait_seconds=1)
                if got:
                    await client.delete(queue, [m.id for m in got])
                    done += len(got)

        await asyncio.gather(*(loop() for _ in range(receivers)))
    return time.perf_counter() - start


def spark_drain(url: str, queue: str, tasks: int, batch: int) -> tuple[float, int]:
    """Drain with ``dynamiq.spark.process`` on local[2]; return seconds and messages."""
    import dynamiq.spark

    spark = dynamiq.spark.local_session("dynamiq-drain-bench")
    try:
        spark.sparkContext.parallelize([0, 1], 2).count()  # start the executors' workers

        def nothing(_: Message) -> None:
            return None

        start = time.perf_counter()
        result = dynamiq.spark.process(
            spark, queue, nothing, url, partitions=tasks, batch_size=batch
        )
        return time.perf_counter() - start, result.messages
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = options(__doc__, n=1_000_000)
    parser.add_argument("--receivers", type=int, default=4, help="plain consumer's receives")
    parser.add_argument("--tasks", type=int, default=2, help="Spark tasks (local[2] runs 2)")
    parser.add_argument("--batch", type=int, default=100, help="messages per receive, both")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dynamiq-spark-bench-") as tmp:
        node = LocalNode(
            "bench",
            0,
            0,
            ["--core-httpport", "0", "--storage-path", tmp, "--core-loglevelstring", "warn"],
            Path(tmp) / "node.log",
        )
        node.start(dict(os.environ))  # returns once the node serves
        try:
            url = node.url
            asyncio.run(_create(url, "drain"))
            seconds = asyncio.run(publish(url, "drain", args.n))
            print(f"published {args.n:,} in {seconds:.1f} s ({args.n / seconds:,.0f} msg/s)")
            seconds = asyncio.run(python_drain(url, "drain", args.n, args.receivers, args.batch))
            python_rate = args.n / seconds
            print(
                f"plain Python consumer drained {args.n:,} in {seconds:.1f} s: "
                f"{python_rate:,.0f} msg/s"
            )
            asyncio.run(publish(url, "drain", args.n))
            seconds, count = spark_drain(url, "drain", args.tasks, args.batch)
            spark_rate = count / seconds
            print(
                f"Spark process() on local[2], {args.tasks} tasks, drained {count:,} in "
                f"{seconds:.1f} s: {spark_rate:,.0f} msg/s ({spark_rate / python_rate:.2f}x)"
            )
        finally:
            node.stop()
    return 0


async def _create(url: str, queue: str) -> None:
    async with AsyncClient(url) as client:
        await client.create_queue(queue, visibility_timeout=300)


if __name__ == "__main__":
    sys.exit(main())
