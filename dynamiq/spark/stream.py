"""Streaming reads: micro-batches of leased messages, deleted once Spark committed them.

Each micro-batch is planned on the driver (in Spark's long-lived Python
planning process): ``latestOffset`` leases up to ``maxMessagesPerBatch``
messages and numbers the batch; ``partitions`` hands them to the tasks;
``commit(end)`` deletes every message of the batches up to ``end``. Until
then a thread keeps their leases alive, so a slow batch is never delivered
twice. A query killed mid-batch deletes nothing: its leases lapse after
``visibilityTimeout`` and the restarted query (from its checkpoint) gets the
messages again. At-least-once: the sink may see a message twice, never zero
times.

Spark calls ``commit`` for a batch only when it plans the next one, so while
a committed-but-not-acknowledged batch is waiting, ``latestOffset`` plans an
empty batch to let that commit happen instead of leaving it leased.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows

from dynamiq.client import AsyncClient, Client
from dynamiq.client.batches import MAX_BATCH, batches
from dynamiq.client.leases import LeaseKeeper
from dynamiq.models import Message
from dynamiq.spark.common import Options, row_of

__all__ = ["StreamReader"]

# Rows per task of a micro-batch.
ROWS_PER_TASK = 500


@dataclass
class LeasedRows(InputPartition):
    """Rows of messages leased while the batch was planned."""

    rows: list[tuple[Any, ...]]


class StreamReader(DataSourceStreamReader):
    """A queue as an unbounded stream of micro-batches (see the module text)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.queue = options.need_queue()
        self._client: Client | None = None
        self._rows: dict[int, list[tuple[Any, ...]]] = {}  # batch -> rows, until planned
        self._pending: dict[int, list[int]] = {}  # batch -> ids, until committed
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Spark ships the reader to the executors for ``read``: only the options.
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    # -- offsets: {"batch": n} -----------------------------------------------

    def initialOffset(self) -> dict[str, int]:
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.options.per_batch)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        following = start["batch"] + 1
        if following in self._rows:  # leased already, not planned yet
            return {"batch": following}
        most = limit.max_rows if isinstance(limit, ReadMaxRows) else self.options.per_batch
        rows = self._lease(min(most, self.options.per_batch))
        with self._lock:
            # A batch run but not committed yet: Spark commits it only when it
            # plans the next one, so plan one even when nothing new came.
            waiting = any(self._pending.values())
        if rows or waiting:
            self._rows[following] = rows
            return {"batch": following}
        return start

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[LeasedRows]:
        out: list[LeasedRows] = []
        for batch in range(start["batch"] + 1, end["batch"] + 1):
            rows = self._rows.pop(batch, None)
            if rows is None:  # planned before a restart: lease afresh for it
                rows = self._lease(self.options.per_batch)
            if rows:
                with self._lock:
                    self._pending[batch] = [r[0] for r in rows]
            out += [
                LeasedRows(rows[i : i + ROWS_PER_TASK]) for i in range(0, len(rows), ROWS_PER_TASK)
            ]
        return out

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, LeasedRows)
        return iter(partition.rows)

    def commit(self, end: dict[str, int]) -> None:
        with self._lock:
            done = [b for b in self._pending if b <= end["batch"]]
            ids = [i for b in done for i in self._pending[b]]
        for chunk in batches(ids, MAX_BATCH):
            self._connect().delete(self.queue, chunk)
        with self._lock:
            for batch in done:
                self._pending.pop(batch, None)

    def stop(self) -> None:
        self._stop.set()
        if self._client is not None:
            self._client.close()

    # -- leases ----------------------------------------------------------------

    def _connect(self) -> Client:
        if self._client is None:
            self._client = Client(self.options.urls, **self.options.client)
        return self._client

    def _lease(self, most: int) -> list[tuple[Any, ...]]:
        o = self.options
        got: list[Message] = []
        while len(got) < most:
            batch = self._connect().receive(
                self.queue, min(MAX_BATCH, most - len(got)), visibility_timeout=o.visibility
            )
            if not batch:
                break
            got += batch
        if got and self._keeper is None:
            self._keeper = threading.Thread(target=self._keep_leases, daemon=True)
            self._keeper.start()
        return [row_of(self.queue, m) for m in got]

    def _keep_leases(self) -> None:
        """Extend the leases of every uncommitted batch until the query stops."""
        asyncio.run(self._keep())

    async def _keep(self) -> None:
        async with AsyncClient(self.options.urls, **self.options.client) as client:
            keeper = LeaseKeeper(client, self.queue, self.options.visibility, self._held)
            task = asyncio.create_task(keeper.run())
            await asyncio.to_thread(self._stop.wait)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _held(self) -> list[int]:
        with self._lock:
            ids = [i for batch in self._pending.values() for i in batch]
        return ids + [r[0] for rows in list(self._rows.values()) for r in rows]
