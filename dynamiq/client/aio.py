"""An asyncio client for the v2 API."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from dynamiq.client.admin import Administration
from dynamiq.client.spool import DEFAULT_MAX_BYTES, Spool, send_waiting
from dynamiq.client.transport import MAX_BACKOFF, Transport, node_urls
from dynamiq.client.wire import (
    Body,
    Extras,
    PublishedTopic,
    message,
    publish_request,
    published,
    published_topic,
)
from dynamiq.client.worker import Handler, Worker, WorkerReport
from dynamiq.errors import BackendUnavailable
from dynamiq.models import AttributeValue, Message, Outgoing, Published

__all__ = ["AsyncClient", "Body"]

log = logging.getLogger("dynamiq.client")


class AsyncClient(Administration):
    """Talk to one Dynamiq node over its v2 API.

    Use as ``async with AsyncClient(url) as client:``. Every method raises the
    ``dynamiq.errors`` class named by the server's error code (for example
    ``QueueNotFound``), and ``BackendUnavailable`` when the node cannot be
    reached.

    A request that cannot reach a node, or that a node answers with 503, goes
    to the next node. A retried publish may store its messages twice (the
    first attempt may have succeeded unseen): delivery is at least once, so
    consumers must be idempotent.
    """

    def __init__(
        self,
        url: str | Sequence[str] | None = None,
        *,
        timeout: float = 60.0,
        rounds: int = 3,
        backoff: float = 0.1,
        spool: str | os.PathLike[str] | Spool | None = None,
        spool_max_bytes: int = DEFAULT_MAX_BYTES,
        spool_sender: bool = True,
        key: str | None = None,
        ca_file: str | None = None,
        client_cert: tuple[str, str] | None = None,
    ) -> None:
        """Prepare a client for one node or several.

        Args:
            url: a node's base URL (``http://127.0.0.1:8081``), a comma-separated
                list or a sequence of them; default ``DYNAMIQ_HOSTS``, else
                ``http://127.0.0.1:8081``. The list is shuffled: clients spread
                over the nodes.
            timeout: seconds allowed for one request (beyond any long-poll wait).
            rounds: how many times every node is tried before an error is raised.
            backoff: seconds to wait after the first round in which every node
                failed; doubled after each further round (at most 5 s).
            spool: a directory (or an open ``Spool``) where a publish no node
                takes is kept, fsynced, instead of raising: the call returns
                ``spooled`` and no ids. Publishes made while some wait there go
                there too, behind them; a background task sends them in order
                as soon as a node takes them (and at start, what a previous
                process left). One process per spool.
            spool_max_bytes: the spool's size limit: beyond it a publish raises
                ``SpoolFull``.
            spool_sender: send from a background task (the blocking client
                sends from a thread instead).
            key: the application key sent with every request (``<key_id>.<secret>``),
                for nodes that need one; default ``DYNAMIQ_KEY``, else none.
            ca_file: the certificate authorities (PEM) that ``https://`` nodes'
                certificates are checked against; default ``DYNAMIQ_CA_FILE``,
                else the system's.
            client_cert: ``(certfile, keyfile)`` shown to nodes that ask for a
                client certificate (``tls.cafile``).
        """
        self._transport = Transport(
            node_urls(url), timeout, rounds, backoff, key, ca_file, client_cert
        )
        self._call = self._transport.call
        self._backoff = backoff
        # Opened on first use, in a thread (as every spool file operation is).
        self._spool: Spool | None = spool if isinstance(spool, Spool) else None
        self._own_spool = spool is not None and self._spool is None
        self._spool_to_open = (
            None if spool is None or isinstance(spool, Spool) else (spool, spool_max_bytes)
        )
        self._spool_sender = spool_sender
        self._sender: asyncio.Task[None] | None = None

    @property
    def key(self) -> str | None:
        """The key this client sends, if any."""
        return self._transport.key

    @property
    def url(self) -> str:
        """The node requests go to now."""
        return self._transport.url

    @property
    def urls(self) -> list[str]:
        """Every node this client may send to."""
        return self._transport.urls

    async def __aenter__(self) -> AsyncClient:
        if await self._open_spool() and self.spool_pending:  # left by a previous process
            self._send_later()
        return self

    async def _open_spool(self) -> Spool | None:
        if self._spool_to_open is not None:
            path, max_bytes = self._spool_to_open
            self._spool = await asyncio.to_thread(Spool, path, max_bytes)
            self._spool_to_open = None
        return self._spool

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection pool (and the spool: what waits there stays); idempotent."""
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender
            self._sender = None
        if self._own_spool and self._spool is not None:
            await asyncio.to_thread(self._spool.close)
        await self._transport.close()

    # -- queues --------------------------------------------------------------

    async def create_queue(self, /, name: str, **settings: Any) -> dict[str, Any]:
        """Create a queue; settings as in ``QueueSettings``. Returns its description."""
        result: dict[str, Any] = await self._call("PUT", f"/v2/queues/{name}", settings)
        return result

    async def configure_queue(self, /, name: str, **changes: Any) -> dict[str, Any]:
        """Change some settings of a queue. Returns its description."""
        result: dict[str, Any] = await self._call("PATCH", f"/v2/queues/{name}", changes)
        return result

    async def queue(self, name: str) -> dict[str, Any]:
        """Return a queue's settings and stats."""
        result: dict[str, Any] = await self._call("GET", f"/v2/queues/{name}")
        return result

    async def queues(self, prefix: str = "", page_size: int = 1000) -> list[str]:
        """Return every queue name (starting with ``prefix``), ``page_size`` a request."""
        return await self._names("/v2/queues", "queues", prefix, page_size)

    async def delete_queue(self, name: str) -> None:
        """Delete a queue and its messages."""
        await self._call("DELETE", f"/v2/queues/{name}")

    async def purge_queue(self, name: str) -> int:
        """Drop every message published before the call; return how many the queue held."""
        result: dict[str, int] = await self._call("POST", f"/v2/queues/{name}/purge")
        return result["purged"]

    async def redrive(
        self, queue: str, *, to: str | None = None, max_per_second: float | None = None
    ) -> dict[str, Any]:
        """Start moving a dead-letter queue's messages back to their source queues
        (or ``to`` one queue); return the task (``task``, ``state``, ``moved``, ...)."""
        payload: dict[str, Any] = {}
        if to is not None:
            payload["to"] = to
        if max_per_second is not None:
            payload["max_per_second"] = max_per_second
        result: dict[str, Any] = await self._call("POST", f"/v2/queues/{queue}/redrive", payload)
        return result

    async def redrive_status(self, queue: str) -> dict[str, Any]:
        """Return the latest redrive of a queue: its state, moved and remaining counts."""
        result: dict[str, Any] = await self._call("GET", f"/v2/queues/{queue}/redrive")
        return result

    async def cancel_redrive(self, queue: str) -> dict[str, Any]:
        """Cancel a running redrive; return where it stopped."""
        result: dict[str, Any] = await self._call("DELETE", f"/v2/queues/{queue}/redrive")
        return result

    # -- messages ------------------------------------------------------------

    async def publish(
        self,
        queue: str,
        bodies: Sequence[Body | Outgoing],
        *,
        delay_seconds: float | None = None,
        ttl_seconds: float | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        routing_key: str | None = None,
    ) -> Published[int]:
        """Publish messages durably; return their ids in order (``duplicate`` says which
        answered a dedup id seen within the queue's window: an ``Outgoing`` carries one).

        ``delay_seconds``, ``ttl_seconds``, ``attributes`` and ``routing_key``
        apply to every message that does not say otherwise (an ``Outgoing``
        carries its own). Inside an OpenTelemetry span (when that library is
        installed) each message also carries the span's ``traceparent``.
        """
        extras = Extras(delay_seconds, ttl_seconds, attributes, routing_key)
        answer = await self._publish(f"/v2/queues/{queue}/messages", bodies, extras)
        return Published(spooled=True) if answer is None else published(answer)

    async def publish_topic(
        self,
        topic: str,
        bodies: Sequence[Body | Outgoing],
        *,
        delay_seconds: float | None = None,
        ttl_seconds: float | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
        routing_key: str | None = None,
    ) -> PublishedTopic:
        """Publish to the queues subscribed to ``topic`` that take each message; return,
        per queue that took any, its copies' ids in order (None: not taken).

        A message without a delay of its own gets each queue's ``delay_seconds``.
        """
        extras = Extras(delay_seconds, ttl_seconds, attributes, routing_key)
        answer = await self._publish(f"/v2/topics/{topic}/messages", bodies, extras)
        return PublishedTopic({}, spooled=True) if answer is None else published_topic(answer)

    async def receive(
        self,
        queue: str,
        max_messages: int = 1,
        *,
        wait_seconds: float = 0.0,
        visibility_timeout: float | None = None,
    ) -> list[Message]:
        """Lease up to ``max_messages`` messages, waiting up to ``wait_seconds`` for one.

        Delete each message once processed; one that is not deleted is
        delivered again after its visibility timeout (at-least-once).
        """
        payload: dict[str, Any] = {"max_messages": max_messages, "wait_seconds": wait_seconds}
        if visibility_timeout is not None:
            payload["visibility_timeout"] = visibility_timeout
        result = await self._call(
            "POST", f"/v2/queues/{queue}/receive", payload, extra_time=wait_seconds
        )
        return [message(m) for m in result["messages"]]

    async def delete(self, queue: str, ids: Sequence[int]) -> list[int]:
        """Delete messages by id; return the ids that existed."""
        payload = {"ids": [str(i) for i in ids]}
        result = await self._call("POST", f"/v2/queues/{queue}/delete", payload)
        return [int(i) for i in result["deleted"]]

    async def change_visibility(
        self, queue: str, ids: Sequence[int], visibility_timeout: float
    ) -> list[int]:
        """Keep leased messages invisible for ``visibility_timeout`` more seconds.

        With 0 the leases end and the messages are visible again at once.
        Returns the ids whose lease was live (and was changed).
        """
        payload = {"ids": [str(i) for i in ids], "visibility_timeout": visibility_timeout}
        result = await self._call("POST", f"/v2/queues/{queue}/visibility", payload)
        return [int(i) for i in result["changed"]]

    async def peek(self, queue: str, message_id: int) -> Message:
        """Read a message without leasing it."""
        result = await self._call("GET", f"/v2/queues/{queue}/messages/{message_id}")
        return message(result["message"])

    async def peek_oldest(self, queue: str, max_messages: int = 10) -> list[Message]:
        """Read a queue's oldest messages, leased or not, without leasing them."""
        result = await self._call("GET", f"/v2/queues/{queue}/peek?max={max_messages}")
        return [message(m) for m in result["messages"]]

    # -- the spool -----------------------------------------------------------

    async def _publish(self, path: str, bodies: Sequence[Body | Outgoing], extras: Extras) -> Any:
        """Send a publish; with a spool, keep it there instead (None) when no node takes
        it, or when earlier ones wait there (they go first)."""
        payload = publish_request(bodies, extras)
        spool = await self._open_spool()
        if spool is None:
            return await self._call("POST", path, payload)
        if not spool.pending:
            try:
                return await self._call("POST", path, payload)
            except BackendUnavailable as exc:
                log.warning("no node took a publish (%s); spooled in %s", exc, spool.path)
        await asyncio.to_thread(spool.append, path, payload)
        self._send_later()
        return None

    def _send_later(self) -> None:
        if self._spool_sender and (self._sender is None or self._sender.done()):
            self._sender = asyncio.create_task(self.send_spooled())

    @property
    def spool_pending(self) -> bool:
        """Whether publishes wait in the spool (once it is open: on first use)."""
        return self._spool is not None and self._spool.pending

    async def flush_spool(self, progress: Callable[[int], None] | None = None) -> int:
        """Send what the spool keeps, in order; return how many messages went. Raises
        ``BackendUnavailable`` when no node takes them (they stay)."""
        spool = await self._open_spool()
        if spool is None:
            return 0
        return await send_waiting(spool, lambda p, b: self._call("POST", p, b), progress)

    async def send_spooled(self) -> None:
        """Send the spool's publishes as soon as a node takes them; return when it is
        empty."""
        pause = self._backoff
        while self._spool is not None and self._spool.pending:
            try:
                await self.flush_spool()
            except BackendUnavailable:
                await asyncio.sleep(pause)
                pause = min(MAX_BACKOFF, pause * 2)

    # -- workers -------------------------------------------------------------

    def worker(self, queue: str, handler: Handler, **options: Any) -> Worker:
        """Return a worker for ``queue`` (options as ``Worker``); ``await worker.run()``
        works until ``worker.stop()``."""
        return Worker(self, queue, handler, **options)

    async def consume(
        self, queue: str, handler: Handler, *, handle_signals: bool = True, **options: Any
    ) -> WorkerReport:
        """Receive, handle and delete ``queue``'s messages until SIGINT or SIGTERM (when
        ``handle_signals`` and in the main thread), the ``limit`` or the
        ``idle_timeout``; return what was done. Options as ``Worker``: ``concurrency``,
        ``batch``, ``max_in_flight``, ``visibility_timeout``, ``retry_delay``."""
        return await self.worker(queue, handler, **options).run(handle_signals=handle_signals)
