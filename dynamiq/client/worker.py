"""The consumer's loop, written once: receive in batches, handle each message, delete
what succeeded, release what failed, keep leases alive, stop without losing anything.

A handler is a coroutine function (run on the loop, ``concurrency`` at once)
or a plain function (run in a pool of ``concurrency`` threads). It succeeds
by returning; the message is then deleted, in batches with others. It fails
by raising: the message is released for a retry, after the queue's retry
backoff (or at once when the queue has none), or after the delay a
``Retry`` exception or the worker's ``retry_delay`` names. After the queue's
``max_receives`` a failing message goes to its dead-letter queue, as any
message does.

``stop()`` (or SIGINT/SIGTERM, when the worker was started by ``consume`` in
the main thread) stops receiving; handlers already running finish, and what
was received but not started yet is released at once. Nothing is deleted
that was not handled, and nothing handled is left undeleted unless the
cluster cannot be reached (then it comes again: at-least-once).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from dynamiq.client.batches import batches
from dynamiq.client.consumer import Consumer
from dynamiq.client.leases import LeaseKeeper
from dynamiq.errors import DynamiqError, RequestTimeout, RetryLater, ServerError
from dynamiq.models import Message

__all__ = ["Handler", "Retry", "Worker", "WorkerReport", "heals"]

log = logging.getLogger("dynamiq.client")

# Called with a message (or, for a worker with ``batched``, a receive's list of them).
Handler = Callable[[Any], Awaitable[object]] | Callable[[Any], object]

# Longest a receive waits for messages: bounds how long stop() waits for one.
POLL_SECONDS = 1.0


class Retry(Exception):
    """Raise from a handler to have its message delivered again after ``seconds``."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"retry after {seconds} s")
        self.seconds = seconds


@dataclass
class WorkerReport:
    """What a worker did."""

    received: int = 0
    succeeded: int = 0
    """Handled, and deleted (or asked to be: see ``unsettled``)."""
    failed: int = 0
    """Raised in the handler: released for a retry."""
    released: int = 0
    """Received but not handled when the worker stopped: released at once."""
    leases_lost: int = 0
    """Leases that had ended before they could be extended."""
    unsettled: int = 0
    """Deletes and releases no node answered: those messages come again."""


def heals(error: DynamiqError) -> bool:
    """Whether asking again later may succeed: no node answered, a node could not
    serve for now (503, 429), or the request took too long; not a queue that does
    not exist or a key without permission."""
    return isinstance(error, RetryLater | ServerError | RequestTimeout)


class Worker:
    """Receive, handle and delete the messages of one queue until stopped."""

    def __init__(
        self,
        client: Consumer,
        queue: str,
        handler: Handler,
        *,
        concurrency: int = 8,
        batch: int = 10,
        max_in_flight: int | None = None,
        visibility_timeout: float = 30.0,
        retry_delay: float | None = None,
        limit: int | None = None,
        idle_timeout: float | None = None,
        delete: bool = True,
        batched: bool = False,
        receivers: int = 1,
    ) -> None:
        """Prepare a worker; ``run()`` starts it.

        Args:
            concurrency: handlers running at once.
            batch: most messages one receive asks for.
            max_in_flight: most messages leased and not settled at once
                (default ``concurrency + batch``).
            visibility_timeout: each lease, extended while its handler runs.
            retry_delay: seconds a failed message waits (default: the queue's
                retry backoff, or none).
            limit: stop after receiving this many messages.
            idle_timeout: stop after this many seconds without a message.
            delete: delete what was handled (else it stays leased until its
                visibility timeout ends, then comes again).
            batched: call the handler once per receive with its list of
                messages; they succeed or fail together.
            receivers: receives in flight at once (more when handlers are
                quicker than a receive's round trip).
        """
        if concurrency < 1 or batch < 1 or visibility_timeout <= 0:
            raise ValueError("concurrency and batch must be >= 1, visibility_timeout > 0")
        self._client, self._queue, self._handler = client, queue, handler
        self._concurrency, self._batch = concurrency, batch
        self._max_in_flight = max(max_in_flight or concurrency + batch, 1)
        self._visibility, self._retry_delay = visibility_timeout, retry_delay
        self._limit, self._idle_timeout, self._delete = limit, idle_timeout, delete
        self._batched, self._receivers = batched, max(1, receivers)
        self._asked = 0  # messages receives in flight asked for
        self._is_coroutine = inspect.iscoroutinefunction(handler)
        self._leased: set[int] = set()  # received and not settled
        self._settle: dict[int, float | None] = {}  # handled: id -> None (delete) or delay
        self._settled = asyncio.Event()
        self._done = False  # nothing more will be handled: settle the rest and end
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self.report = WorkerReport()

    def stop(self) -> None:
        """Stop receiving; finish what runs, release the rest (safe from any thread)."""
        self._stopping.set()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake.set)

    async def run(self, *, handle_signals: bool = False) -> WorkerReport:
        """Work until stopped, the limit is reached or the queue stays idle; return
        the report. With ``handle_signals``, SIGINT and SIGTERM stop the worker."""
        self._loop = asyncio.get_running_loop()
        keeper = LeaseKeeper(self._client, self._queue, self._visibility, self._held)
        keeping = asyncio.create_task(keeper.run())
        settling = asyncio.create_task(self._settle_loop())
        pool = None if self._is_coroutine else ThreadPoolExecutor(self._concurrency)
        slots = asyncio.Semaphore(self._concurrency)
        running: set[asyncio.Task[None]] = set()
        with _signals(self._loop, self.stop, handle_signals):
            loops = [
                asyncio.create_task(self._receive_loop(slots, running, pool))
                for _ in range(self._receivers)
            ]
            try:
                await asyncio.gather(*loops)
            finally:
                for receiving in loops:  # one failed: the others end with it
                    receiving.cancel()
                await asyncio.gather(*loops, *running, return_exceptions=True)
                keeping.cancel()
                self._done = True
                self._settled.set()
                await settling  # settles what is left, then ends
                if pool is not None:
                    pool.shutdown(wait=False)
        self.report.leases_lost = keeper.lost
        return self.report

    async def _receive_loop(
        self,
        slots: asyncio.Semaphore,
        running: set[asyncio.Task[None]],
        pool: ThreadPoolExecutor | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        idle_since = loop.time()
        while not self._stopping.is_set():
            room = self._max_in_flight - len(self._leased) - self._asked
            if self._limit is not None:
                room = min(room, self._limit - self.report.received - self._asked)
                if room <= 0 and not self._leased and not self._asked:
                    return
            if room <= 0:  # wait for a handler to finish
                self._wake.clear()
                await self._wake.wait()
                continue
            count = min(room, self._batch)
            self._asked += count  # other receive loops leave room for these
            try:
                got = await self._receive(count)
            finally:
                self._asked -= count
            if not got:
                idle = self._idle_timeout
                if idle is not None and loop.time() - idle_since >= idle:
                    return
                continue
            idle_since = loop.time()
            self.report.received += len(got)
            self._leased.update(m.id for m in got)
            units = [got] if self._batched else [[m] for m in got]
            for index, unit in enumerate(units):
                await slots.acquire()
                if self._stopping.is_set():
                    slots.release()
                    self._release_unstarted([m for left in units[index:] for m in left])
                    return
                task = asyncio.create_task(self._handle(unit, slots, pool))
                running.add(task)
                task.add_done_callback(running.discard)

    async def _receive(self, count: int) -> list[Message]:
        """Receive up to ``count``, waiting at most ``POLL_SECONDS`` (so that a stop is
        seen soon); [] when no node answers, or answers an error that waiting heals.

        Raises:
            DynamiqError: an error that waiting does not heal (no such queue, no
                permission): the worker ends with it.
        """
        try:
            return await self._client.receive(
                self._queue, count, wait_seconds=POLL_SECONDS, visibility_timeout=self._visibility
            )
        except DynamiqError as exc:
            if not heals(exc):
                raise
            log.warning("receive from %s failed: %s", self._queue, exc)
            await asyncio.sleep(POLL_SECONDS)
            return []

    async def _handle(
        self, unit: list[Message], slots: asyncio.Semaphore, pool: ThreadPoolExecutor | None
    ) -> None:
        """Run the handler on a message (or a batch of them) and note how it went."""
        arg: Any = unit if self._batched else unit[0]
        try:
            if pool is None:
                await self._handler(arg)  # type: ignore[misc]
            else:
                await asyncio.get_running_loop().run_in_executor(pool, self._handler, arg)
        except Retry as retry:
            self._failed(unit, retry.seconds)
        except Exception:
            log.exception("handler failed on message %d of %s", unit[0].id, self._queue)
            self._failed(unit, self._retry_delay)
        else:
            self.report.succeeded += len(unit)
            for message in unit:
                if self._delete:
                    self._settle[message.id] = None
                else:  # left leased: no longer kept alive
                    self._leased.discard(message.id)
        finally:
            slots.release()
            self._settled.set()
            self._wake.set()

    def _failed(self, unit: list[Message], delay: float | None) -> None:
        self.report.failed += len(unit)
        for message in unit:
            self._settle[message.id] = delay if delay is not None else 0.0

    def _release_unstarted(self, messages: list[Message]) -> None:
        self.report.released += len(messages)
        for m in messages:
            self._settle[m.id] = 0.0

    def _held(self) -> list[int]:
        """The leases to keep: received and not settled yet."""
        return [i for i in self._leased if i not in self._settle]

    async def _settle_loop(self) -> None:
        while not self._done:
            await self._settled.wait()
            self._settled.clear()
            await self._settle_now()
        await self._settle_now()

    async def _settle_now(self) -> None:
        """Delete what succeeded and release what failed, in batches."""
        settle, self._settle = self._settle, {}
        self._leased.difference_update(settle)  # not kept alive while they are settled
        deletes = [i for i, delay in settle.items() if delay is None]
        delays: dict[float, list[int]] = {}
        for i, delay in settle.items():
            if delay is not None:
                delays.setdefault(delay, []).append(i)
        steps: list[tuple[list[int], float | None]] = [(ids, None) for ids in batches(deletes)]
        steps += [(ids, delay) for delay, all_ids in delays.items() for ids in batches(all_ids)]
        for done, (ids, delay) in enumerate(steps):
            try:
                if delay is None:
                    await self._client.delete(self._queue, ids)
                else:
                    await self._client.change_visibility(self._queue, ids, delay)
            except DynamiqError as exc:
                unsettled = sum(len(left) for left, _ in steps[done:])
                log.warning("could not settle %d messages of %s: %s", unsettled, self._queue, exc)
                self.report.unsettled += unsettled
                break
        self._wake.set()


@contextlib.contextmanager
def _signals(
    loop: asyncio.AbstractEventLoop, stop: Callable[[], None], wanted: bool
) -> Iterator[None]:
    """Let SIGINT and SIGTERM call ``stop`` while the block runs (main thread only)."""
    installed: list[signal.Signals] = []
    if wanted and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
            installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
