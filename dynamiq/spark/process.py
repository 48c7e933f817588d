"""Receive-and-delete from Spark executors: each task runs the user's function per message.

``process(spark, "events", fn, url=...)`` starts one task per partition
(the session's default parallelism unless told), spread over the cluster's
live nodes. Each task receives batches, calls ``fn(message)`` for each, and
deletes exactly the messages for which ``fn`` returned; when ``fn`` raises,
the task deletes the messages handled before in that batch and fails, so the
failed message and the rest of its batch stay leased until their
visibility timeout and come back: Spark retries the task (``local[N,F]`` or
``spark.task.maxFailures``) and a retry, or another task, handles them.

Tasks drain: each stops once the queue holds nothing (not even messages in
flight elsewhere, which may come back). At-least-once: a task killed between
``fn`` and the delete leaves its messages to be handled again, so ``fn``
must be idempotent (key its effects by ``message.id``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from dynamiq.client import Client
from dynamiq.client.batches import MAX_BATCH, batches
from dynamiq.models import Message
from dynamiq.spark.common import live_nodes, node_urls

__all__ = ["Processed", "delete", "process"]


@dataclass(frozen=True)
class Processed:
    """What a ``process`` run did: messages handled and deleted, tasks run."""

    messages: int
    tasks: int


def process(
    spark: SparkSession,
    queue: str,
    fn: Callable[[Message], Any],
    url: str | list[str] | None = None,
    *,
    partitions: int | None = None,
    batch_size: int = 100,
    visibility_timeout: float = 60.0,
    key: str | None = None,
    ca_file: str | None = None,
) -> Processed:
    """Drain ``queue`` through ``fn`` on the executors; see the module text for the guarantee.

    ``key`` and ``ca_file`` as for ``Client`` (defaults ``DYNAMIQ_KEY`` and
    ``DYNAMIQ_CA_FILE`` where the executors run).
    """
    nodes = live_nodes(node_urls(url), key, ca_file)
    count = partitions or spark.sparkContext.defaultParallelism
    plan = [nodes[i % len(nodes)] for i in range(count)]
    visibility = float(visibility_timeout)

    def task(assigned: Iterable[str]) -> Iterator[int]:
        for node in assigned:
            with Client([node], key=key, ca_file=ca_file) as client:
                yield _drain(client, queue, fn, batch_size, visibility)

    done = spark.sparkContext.parallelize(plan, count).mapPartitions(task).collect()
    return Processed(sum(done), count)


def delete(
    df: DataFrame,
    queue: str,
    url: str | list[str] | None = None,
    *,
    key: str | None = None,
    ca_file: str | None = None,
) -> int:
    """Delete the messages whose ids are the ``id`` column of ``df``, from the executors.

    The end of a read-then-write job: read with ``format("dynamiq")`` (which
    leases), pin the rows (``localCheckpoint()``: a second evaluation would
    lease other messages), write the results, then delete what was read.
    Returns how many existed.
    """
    nodes = node_urls(url)

    def task(rows: Iterable[Any]) -> Iterator[int]:
        with Client(nodes, key=key, ca_file=ca_file) as client:
            yield sum(
                len(client.delete(queue, ids))
                for ids in batches((int(row.id) for row in rows), MAX_BATCH)
            )

    return sum(df.select("id").rdd.mapPartitions(task).collect())


def _drain(
    client: Client, queue: str, fn: Callable[[Message], Any], size: int, lease: float
) -> int:
    handled = 0
    while True:
        got = client.receive(queue, size, wait_seconds=1.0, visibility_timeout=lease)
        if not got:
            if client.queue(queue)["stats"]["depth"] == 0:
                return handled
            continue
        ok: list[int] = []
        try:
            for message in got:
                fn(message)
                ok.append(message.id)
        finally:
            if ok:
                client.delete(queue, ok)
                handled += len(ok)
