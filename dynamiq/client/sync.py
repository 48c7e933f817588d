"""A blocking client: the asyncio client run on a private event loop."""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from dynamiq.client.aio import AsyncClient
from dynamiq.client.spool import DEFAULT_MAX_BYTES, Spool
from dynamiq.client.worker import Worker as AsyncWorker
from dynamiq.client.worker import WorkerReport
from dynamiq.models import Message

__all__ = ["Client", "Worker"]

T = TypeVar("T")
P = ParamSpec("P")


def _blocking(
    method: Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Client, P], T]:
    """Return ``method`` of ``AsyncClient`` as a method of ``Client`` that blocks until
    it is done: the same arguments, answer, errors and documentation."""

    @functools.wraps(method)
    def run(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(method(self._client, *args, **kwargs))

    return run


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

    # Each the AsyncClient method of the same name, run to its end.
    create_queue = _blocking(AsyncClient.create_queue)
    configure_queue = _blocking(AsyncClient.configure_queue)
    queue = _blocking(AsyncClient.queue)
    queues = _blocking(AsyncClient.queues)
    delete_queue = _blocking(AsyncClient.delete_queue)
    purge_queue = _blocking(AsyncClient.purge_queue)
    redrive = _blocking(AsyncClient.redrive)
    redrive_status = _blocking(AsyncClient.redrive_status)
    cancel_redrive = _blocking(AsyncClient.cancel_redrive)
    create_topic = _blocking(AsyncClient.create_topic)
    delete_topic = _blocking(AsyncClient.delete_topic)
    topics = _blocking(AsyncClient.topics)
    subscribe = _blocking(AsyncClient.subscribe)
    subscriptions = _blocking(AsyncClient.subscriptions)
    unsubscribe = _blocking(AsyncClient.unsubscribe)
    webhooks = _blocking(AsyncClient.webhooks)
    create_webhook = _blocking(AsyncClient.create_webhook)
    delete_webhook = _blocking(AsyncClient.delete_webhook)
    rotate_signing_key = _blocking(AsyncClient.rotate_signing_key)
    publish = _blocking(AsyncClient.publish)
    publish_topic = _blocking(AsyncClient.publish_topic)
    receive = _blocking(AsyncClient.receive)
    delete = _blocking(AsyncClient.delete)
    change_visibility = _blocking(AsyncClient.change_visibility)
    peek = _blocking(AsyncClient.peek)
    peek_oldest = _blocking(AsyncClient.peek_oldest)
    stats = _blocking(AsyncClient.stats)
    stats_page = _blocking(AsyncClient.stats_page)
    status = _blocking(AsyncClient.status)
    create_key = _blocking(AsyncClient.create_key)
    keys = _blocking(AsyncClient.keys)
    revoke_key = _blocking(AsyncClient.revoke_key)
    flush_spool = _blocking(AsyncClient.flush_spool)

    @property
    def spool_pending(self) -> bool:
        """Whether publishes wait in the spool."""
        return self._client.spool_pending

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
