"""Talking to Riak KV's HTTP API: the transport seam, node failover, one deadline per call.

Every call answers within ``timeout`` seconds, waiting for one of the
``pool_size`` connections included, and the first request of a batch to fail
cancels the others (a paused Riak must not hold every slot).
"""

from __future__ import annotations

import asyncio
import email
import email.policy
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import aiohttp

from dynamiq.errors import BackendUnavailable

__all__ = ["Answer", "HttpTransport", "RiakHttp", "RiakRequest", "Transport", "siblings"]

T = TypeVar("T")

Answer = tuple[int, dict[str, str], bytes]  # status, headers (lower-case names), body


@dataclass(frozen=True, slots=True)
class RiakRequest:
    """One HTTP request to a Riak node."""

    method: str
    url: str
    params: dict[str, str] | None = None
    data: bytes | None = None
    headers: dict[str, str] | None = None


class Transport(Protocol):
    """Sends one HTTP request to a Riak node (the seam the adapter's tests replace)."""

    async def __call__(self, request: RiakRequest) -> Answer:
        """Return the answer; raise ``OSError``/``aiohttp.ClientError`` when none came."""
        ...

    async def close(self) -> None:
        """Release the connections; idempotent."""
        ...


class HttpTransport:
    """The real transport: a pooled aiohttp session."""

    def __init__(self, pool_size: int) -> None:
        self._pool_size = pool_size
        self._session: aiohttp.ClientSession | None = None

    async def __call__(self, request: RiakRequest) -> Answer:
        """Send the request on a pooled connection."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._pool_size)
            )
        async with self._session.request(
            request.method,
            request.url,
            params=request.params,
            data=request.data,
            headers=request.headers,
        ) as response:
            headers = {name.lower(): value for name, value in response.headers.items()}
            return response.status, headers, await response.read()

    async def close(self) -> None:
        """Close the session; idempotent."""
        if self._session is not None:
            await self._session.close()
            self._session = None


class RiakHttp:
    """Requests to a list of Riak nodes: failover, a connection budget, one deadline."""

    def __init__(
        self, nodes: Sequence[str], pool_size: int, timeout: float, transport: Transport
    ) -> None:
        if not nodes:
            raise ValueError("at least one Riak node is needed")
        self._nodes = [n.rstrip("/") for n in nodes]
        self._current = 0
        self._slots = asyncio.Semaphore(pool_size)
        self.timeout = timeout
        self._transport = transport

    async def each(
        self, calls: Sequence[Callable[[], Awaitable[T]]], done: dict[int, T] | None = None
    ) -> list[T]:
        """Run ``calls`` at most ``pool_size`` at a time, all within one ``timeout``.

        ``done`` receives each call's result by index as it finishes, so a
        caller still knows what succeeded when the batch fails.

        Raises:
            BackendUnavailable: on the first failure (or the deadline), once the
                calls still waiting or in flight are cancelled.
        """
        done = {} if done is None else done

        async def bounded(i: int, call: Callable[[], Awaitable[T]]) -> None:
            async with self._slots:
                done[i] = await call()

        tasks = [asyncio.ensure_future(bounded(i, c)) for i, c in enumerate(calls)]
        failure: BackendUnavailable | None = None
        try:
            async with asyncio.timeout(self.timeout):
                for finished in asyncio.as_completed(tasks):
                    await finished
        except BackendUnavailable as exc:
            failure = exc
        except TimeoutError:
            failure = BackendUnavailable(f"Riak did not answer within {self.timeout:g} s")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if failure is not None:
            raise failure
        return [done[i] for i in range(len(calls))]

    async def call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
        ok: tuple[int, ...],
    ) -> Answer:
        """Send to the current node, failing over to the next on errors; check the status.

        The nodes tried share one ``timeout``.
        """
        last = ""
        try:
            async with asyncio.timeout(self.timeout):
                for attempt in range(len(self._nodes)):
                    index = (self._current + attempt) % len(self._nodes)
                    node = self._nodes[index]
                    try:
                        status, got, body = await self._transport(
                            RiakRequest(method, node + path, params, data, headers)
                        )
                    except (aiohttp.ClientError, OSError) as exc:
                        last = f"{node}: {exc!r}"
                        continue
                    if status >= 500:
                        last = f"{node}: HTTP {status} {body[:200]!r}"
                        continue
                    if status not in ok:
                        raise BackendUnavailable(
                            f"Riak {method} {path}: HTTP {status} {body[:200]!r}"
                        )
                    self._current = index
                    return status, got, body
        except TimeoutError:
            last = f"no answer within {self.timeout:g} s"
        raise BackendUnavailable(f"no Riak node answered ({last})")

    async def close(self) -> None:
        """Release the transport; idempotent."""
        await self._transport.close()


def siblings(content_type: str, body: bytes) -> list[tuple[bool, bytes]]:
    """Read a ``300 Multiple Choices`` multipart body: ``(deleted, value)`` per sibling."""
    message = email.message_from_bytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body,
        policy=email.policy.HTTP,
    )
    out: list[tuple[bool, bytes]] = []
    for part in message.iter_parts():
        value = part.get_payload(decode=True) or b""
        out.append((bool(part.get("X-Riak-Deleted")), bytes(value)))
    return out
