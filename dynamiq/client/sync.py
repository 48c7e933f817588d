"""A blocking client: the asyncio client run on a private event loop."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from dynamiq.client.aio import AsyncClient
from dynamiq.client.spool import DEFAULT_MAX_BYTES, Spool
from dynamiq.client.wire import Body
from dynamiq.client.worker import Worker as AsyncWorker
from dynamiq.client.worker import WorkerReport
from dynamiq.models import AttributeValue, Message, Outgoing, Published

__all__ = ["Client", "Worker"]

T = TypeVar("T")


class Client:
    """Blocking twin of ``AsyncClient``; use it where no event loop runs.

    Every method has the meaning, arguments and errors of the ``AsyncClient``
    method of the same name.
    """

    def __init__(
        self,
        url: str | Sequence[str] | None = None,
        *,
        timeout: float = 60.0,
        rounds: int = 3,
        backoff: float = 0.1,
        spool: str | os.PathLike[str] | None = None,
        spool_max_bytes: int = DEFAULT_MAX_BYTES,
        key: str | None = None,
        ca_file: str | None = None,
        client_cert: tuple[str, str] | None = None,
    ) -> None:
        """Prepare a client for one node or several (see ``AsyncClient``); spooled
        publishes are sent from a thread."""
        self._loop = asyncio.new_event_loop()
        self._spool = None if spool is None else Spool(spool, spool_max_bytes)
        options: dict[str, Any] = {"timeout": timeout, "rounds": rounds, "backoff": backoff}
        options |= {"key": key, "ca_file": ca_file, "client_cert": client_cert}
        self._client = AsyncClient(url, spool=self._spool, spool_sender=False, **options)
        self._sender = (
            None if self._spool is None else _Sender(self._spool, self._client.urls, options)
        )
        self._keep_sending()

    @property
    def url(self) -> str:
        """The node requests go to now."""
        return self._client.url

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool, the private loop and the spool; idempotent."""
        if not self._loop.is_closed():
            if self._sender is not None:
                self._sender.stop()
            self._loop.run_until_complete(self._client.close())
            self._loop.close()
            if self._spool is not None:
                self._spool.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            return self._loop.run_until_complete(coro)
        finally:
            self._keep_sending()

    def _keep_sending(self) -> None:
        if self._sender is not None and self._client.spool_pending:
            self._sender.start()

    def peek_oldest(self, queue: str, max_messages: int = 10) -> list[Message]:
        """Read a queue's oldest messages without leasing them."""
        return self._run(self._client.peek_oldest(queue, max_messages))

    def stats(self) -> dict[str, Any]:
        """Return every queue's stats and their sums."""
        return self._run(self._client.stats())

    def status(self) -> dict[str, Any]:
        """Return the node asked and the members it sees."""
        return self._run(self._client.status())

    @property
    def spool_pending(self) -> bool:
        """Whether publishes wait in the spool."""
        return self._client.spool_pending

    def flush_spool(self, progress: Callable[[int], None] | None = None) -> int:
        """Send what the spool keeps, in order; return how many messages went."""
        return self._run(self._client.flush_spool(progress))

    def create_queue(self, name: str, **settings: Any) -> dict[str, Any]:
        """Create a queue."""
        return self._run(self._client.create_queue(name, **settings))

    def configure_queue(self, name: str, **changes: Any) -> dict[str, Any]:
        """Change some settings of a queue."""
        return self._run(self._client.configure_queue(name, **changes))

    def queue(self, name: str) -> dict[str, Any]:
        """Return a queue's settings and stats."""
        return self._run(self._client.queue(name))

    def queues(self) -> list[str]:
        """Return every queue name."""
        return self._run(self._client.queues())

    def delete_queue(self, name: str) -> None:
        """Delete a queue and its messages."""
        self._run(self._client.delete_queue(name))

    def purge_queue(self, name: str) -> int:
        """Drop every message published before the call; return how many the queue held."""
        return self._run(self._client.purge_queue(name))

    def redrive(
        self, queue: str, *, to: str | None = None, max_per_second: float | None = None
    ) -> dict[str, Any]:
        """Start moving a dead-letter queue's messages back; return the task."""
        return self._run(self._client.redrive(queue, to=to, max_per_second=max_per_second))

    def redrive_status(self, queue: str) -> dict[str, Any]:
        """Return the latest redrive of a queue."""
        return self._run(self._client.redrive_status(queue))

    def cancel_redrive(self, queue: str) -> dict[str, Any]:
        """Cancel a running redrive."""
        return self._run(self._client.cancel_redrive(queue))

    def create_topic(self, name: str) -> None:
        """Create a topic."""
        self._run(self._client.create_topic(name))

    def delete_topic(self, name: str) -> None:
        """Delete a topic."""
        self._run(self._client.delete_topic(name))

    def topics(self) -> list[str]:
        """Return every topic name."""
        return self._run(self._client.topics())

    def subscribe(
        self,
        topic: str,
        queue: str,
        *,
        pattern: str | None = None,
        filter_policy: dict[str, Any] | None = None,
    ) -> list[str]:
        """Subscribe a queue to a topic, or change what it takes (see ``AsyncClient``)."""
        return self._run(
            self._client.subscribe(topic, queue, pattern=pattern, filter_policy=filter_policy)
        )

    def subscriptions(self, topic: str) -> list[dict[str, Any]]:
        """Return a topic's subscriptions, each with its pattern and filter if set."""
        return self._run(self._client.subscriptions(topic))

    def unsubscribe(self, topic: str, queue: str) -> list[str]:
        """Unsubscribe a queue from a topic."""
        return self._run(self._client.unsubscribe(topic, queue))

    def publish(
        self,
        queue: str,
        bodies: Sequence[Body | Outgoing],
        *,
        delay_seconds: float | None = None,
        ttl_seconds: float | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        routing_key: str | None = None,
    ) -> Published[int]:
        """Publish messages durably; return their ids (see ``AsyncClient.publish``)."""
        return self._run(
            self._client.publish(
                queue,
                bodies,
                delay_seconds=delay_seconds,
                ttl_seconds=ttl_seconds,
                attributes=attributes,
                routing_key=routing_key,
            )
        )

    def publish_topic(
        self,
        topic: str,
        bodies: Sequence[Body | Outgoing],
        *,
        delay_seconds: float | None = None,
        ttl_seconds: float | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        routing_key: str | None = None,
    ) -> dict[str, Published[int | None]]:
        """Publish to the subscribed queues that take each message; ids per queue."""
        return self._run(
            self._client.publish_topic(
                topic,
                bodies,
                delay_seconds=delay_seconds,
                ttl_seconds=ttl_seconds,
                attributes=attributes,
                routing_key=routing_key,
            )
        )

    def receive(
        self,
        queue: str,
        max_messages: int = 1,
        *,
        wait_seconds: float = 0.0,
        visibility_timeout: float | None = None,
    ) -> list[Message]:
        """Lease up to ``max_messages`` messages."""
        return self._run(
            self._client.receive(
                queue,
                max_messages,
                wait_seconds=wait_seconds,
                visibility_timeout=visibility_timeout,
            )
        )

    def delete(self, queue: str, ids: Sequence[int]) -> list[int]:
        """Delete messages; return the ids that existed."""
        return self._run(self._client.delete(queue, ids))

    def change_visibility(
        self, queue: str, ids: Sequence[int], visibility_timeout: float
    ) -> list[int]:
        """Extend leases, or end them with 0; return the ids changed."""
        return self._run(self._client.change_visibility(queue, ids, visibility_timeout))

    def peek(self, queue: str, message_id: int) -> Message:
        """Read a message without leasing it."""
        return self._run(self._client.peek(queue, message_id))

    def worker(self, queue: str, handler: Callable[[Message], object], **options: Any) -> Worker:
        """Return a blocking worker for ``queue`` (options as ``dynamiq.client.worker.Worker``):
        ``worker.run()`` works until ``worker.stop()``, which any thread may call."""
        return Worker(self, self._client.worker(queue, handler, **options))

    def consume(
        self,
        queue: str,
        handler: Callable[[Message], object],
        *,
        handle_signals: bool = True,
        **options: Any,
    ) -> WorkerReport:
        """Receive, handle (in a pool of ``concurrency`` threads) and delete ``queue``'s
        messages until SIGINT or SIGTERM, the ``limit`` or the ``idle_timeout``
        (see ``AsyncClient.consume``); return what was done."""
        return self.worker(queue, handler, **options).run(handle_signals=handle_signals)


class Worker:
    """A worker run on a blocking client's loop."""

    def __init__(self, client: Client, worker: AsyncWorker) -> None:
        self._client, self._worker = client, worker

    @property
    def report(self) -> WorkerReport:
        """What the worker did so far."""
        return self._worker.report

    def run(self, *, handle_signals: bool = False) -> WorkerReport:
        """Work until stopped (by SIGINT/SIGTERM too, with ``handle_signals``)."""
        return self._client._run(self._worker.run(handle_signals=handle_signals))

    def stop(self) -> None:
        """Stop receiving; finish what runs and release the rest (any thread)."""
        self._worker.stop()


class _Sender:
    """A thread that sends a spool's publishes as soon as a node takes them."""

    def __init__(self, spool: Spool, urls: list[str], options: dict[str, Any]) -> None:
        self._spool, self._urls, self._options = spool, urls, options
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start sending unless a thread is at it already."""
        if self._thread is None or not self._thread.is_alive():
            started = threading.Event()
            self._thread = threading.Thread(
                target=self._main, args=(started,), name="dynamiq-spool", daemon=True
            )
            self._thread.start()
            started.wait()

    def stop(self) -> None:
        """Stop sending (what waits stays in the spool) and wait for the thread."""
        if self._thread is not None and self._thread.is_alive():
            assert self._loop is not None and self._task is not None
            self._loop.call_soon_threadsafe(self._task.cancel)
            self._thread.join()

    def _main(self, started: threading.Event) -> None:
        loop = self._loop = asyncio.new_event_loop()
        client = AsyncClient(self._urls, spool=self._spool, spool_sender=False, **self._options)
        self._task = loop.create_task(client.send_spooled())
        started.set()
        try:
            loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        finally:
            loop.run_until_complete(client.close())
            loop.close()
