"""The ``dynamiq`` Spark data source: batch reads, streaming reads, writes.

Register it once per session with ``dynamiq.spark.register(spark)``, then::

    spark.read.format("dynamiq").option("url", "http://n1:8081,http://n2:8081")
        .option("queue", "events").option("maxMessages", 10000).load()
    spark.readStream.format("dynamiq").option("url", ...).option("queue", "events").load()
    df.write.format("dynamiq").option("url", ...).option("topic", "results").mode("append").save()
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import Row, StructType

from dynamiq.client import Client
from dynamiq.client.batches import batches
from dynamiq.spark.common import SCHEMA, Options, live_nodes, row_of

__all__ = ["DynamiqDataSource"]


class DynamiqDataSource(DataSource):
    """Messages of a Dynamiq queue as rows; rows published to a queue or topic."""

    @classmethod
    def name(cls) -> str:
        return "dynamiq"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(Options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from dynamiq.spark.stream import StreamReader

        return StreamReader(Options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return Writer(Options(self.options))


@dataclass
class NodePartition(InputPartition):
    """One task's share: up to ``count`` messages received through the node at ``url``."""

    url: str
    count: int


class BatchReader(DataSourceReader):
    """Lease up to ``maxMessages`` messages, ``tasksPerNode`` tasks per live node in parallel.

    The messages stay leased for ``visibilityTimeout`` seconds and come back
    unless deleted (``dynamiq.spark.process`` deletes what its function
    handled); with ``deleteOnRead`` each task deletes what it read once the
    rows are handed to Spark (at-most-once for the job).
    """

    def __init__(self, options: Options) -> None:
        self.options = options
        options.need_queue()

    def partitions(self) -> list[NodePartition]:
        nodes = live_nodes(self.options.urls, **self.options.client) * self.options.tasks_per_node
        total, tasks = self.options.max_messages, len(nodes)
        shares = [total // tasks + (1 if i < total % tasks else 0) for i in range(tasks)]
        return [NodePartition(url, n) for url, n in zip(nodes, shares, strict=True) if n]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, NodePartition)
        o, queue = self.options, self.options.need_queue()
        left = partition.count
        with Client([partition.url], **o.client) as client:
            while left > 0:
                got = client.receive(
                    queue,
                    min(o.batch_size, left),
                    wait_seconds=o.wait,
                    visibility_timeout=o.visibility,
                )
                if not got:
                    return
                left -= len(got)
                for message in got:
                    yield row_of(queue, message)
                if o.delete:
                    client.delete(queue, [m.id for m in got])


@dataclass
class Published(WriterCommitMessage):
    """How many messages one task published."""

    count: int


class Writer(DataSourceWriter):
    """Publish rows in batches from the executors, to a ``topic`` or a ``queue``.

    The body of a message is the row's ``body`` column (binary or string),
    else its ``value`` column, else the whole row as JSON. Each batch is
    durable once published: a task that fails and is retried by Spark
    publishes its rows again (at-least-once).
    """

    def __init__(self, options: Options) -> None:
        if bool(options.topic) == bool(options.queue):
            raise ValueError("dynamiq: set exactly one of options 'topic' and 'queue'")
        self.options = options

    def write(self, iterator: Iterator[Row]) -> Published:
        count = 0
        with Client(self.options.urls, **self.options.client) as client:
            for batch in batches((_body(row) for row in iterator), self.options.batch_size):
                count += self._publish(client, batch)
        return Published(count)

    def _publish(self, client: Client, bodies: list[bytes]) -> int:
        if self.options.topic:
            client.publish_topic(self.options.topic, bodies)
        else:
            client.publish(self.options.queue, bodies)
        return len(bodies)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to do: every batch was durable when its task finished."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to undo: what failed tasks published stays published."""


def _body(row: Row) -> bytes:
    fields = row.asDict()
    for name in ("body", "value"):
        if name in fields:
            value = fields[name]
            if isinstance(value, bytes | bytearray):
                return bytes(value)
            return b"" if value is None else str(value).encode()
    return json.dumps(fields, default=str, separators=(",", ":")).encode()
