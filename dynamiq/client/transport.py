"""Requests to a list of nodes: the next node when one cannot serve, rounds with backoff."""

from __future__ import annotations

import asyncio
import os
import random
import ssl
from collections.abc import Sequence
from typing import Any

import aiohttp
import msgspec

from dynamiq.errors import BackendUnavailable, RetryLater, error_for_code

__all__ = ["DEFAULT_URL", "MAX_BACKOFF", "Transport", "node_urls", "tls_context"]

DEFAULT_URL = "http://127.0.0.1:8081"
MAX_BACKOFF = 5.0


def node_urls(url: str | Sequence[str] | None) -> list[str]:
    """Return the nodes' base URLs, shuffled: one, a comma-separated list or a sequence;
    default ``DYNAMIQ_HOSTS``, else ``http://127.0.0.1:8081``.

    Raises:
        ValueError: no URL is given.
    """
    if url is None:
        url = os.environ.get("DYNAMIQ_HOSTS") or DEFAULT_URL
    urls = url.split(",") if isinstance(url, str) else list(url)
    out = [u.strip().rstrip("/") for u in urls if u.strip()]
    if not out:
        raise ValueError("no node URL given")
    random.shuffle(out)
    return out


def tls_context(
    ca_file: str | None = None, client_cert: tuple[str, str] | None = None
) -> ssl.SSLContext:
    """Return the context ``https://`` nodes are called with: their certificates checked
    against ``ca_file`` (default ``DYNAMIQ_CA_FILE``, else the system's authorities),
    and ``client_cert`` shown when given."""
    context = ssl.create_default_context(cafile=ca_file or os.environ.get("DYNAMIQ_CA_FILE"))
    if client_cert is not None:
        context.load_cert_chain(*client_cert)
    return context


class Transport:
    """JSON requests to the first node that serves them, with a key when one is given."""

    def __init__(
        self,
        urls: list[str],
        timeout: float,
        rounds: int,
        backoff: float,
        key: str | None = None,
        ca_file: str | None = None,
        client_cert: tuple[str, str] | None = None,
    ) -> None:
        self._urls = urls
        self._current = 0
        self._timeout = timeout
        self._rounds = max(1, rounds)
        self._backoff = backoff
        self._session: aiohttp.ClientSession | None = None
        key = os.environ.get("DYNAMIQ_KEY") if key is None else key
        self.key = key or None  # sent with every request, if any
        self._auth = {"Authorization": f"Bearer {key}"} if key else {}
        https = any(u.startswith("https:") for u in urls)
        self._tls: ssl.SSLContext | bool = tls_context(ca_file, client_cert) if https else True

    @property
    def url(self) -> str:
        """The node requests go to now."""
        return self._urls[self._current]

    @property
    def urls(self) -> list[str]:
        """Every node this client may send to."""
        return list(self._urls)

    async def close(self) -> None:
        """Close the connection pool; idempotent."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call(
        self, method: str, path: str, payload: Any = None, extra_time: float = 0.0
    ) -> Any:
        """Send a request and return its decoded answer, moving to the next node when one
        cannot be reached or answers 503, backing off once every node failed a round.

        Raises:
            DynamiqError: the class the node's error code names.
        """
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._tls))
        data = msgspec.json.encode(payload) if payload is not None else None
        nodes = len(self._urls)
        for attempt in range(self._rounds * nodes):
            try:
                return await self._once(method, path, data, extra_time)
            except BackendUnavailable as exc:
                self._current = (self._current + 1) % nodes
                if attempt + 1 == self._rounds * nodes:
                    raise
                if (attempt + 1) % nodes == 0:  # every node failed this round
                    delay = self._backoff * 2 ** ((attempt + 1) // nodes - 1)
                    await self.rest(min(MAX_BACKOFF, max(delay, exc.retry_after or 0)))
        raise AssertionError("unreachable")

    async def rest(self, seconds: float) -> None:
        """Wait before the next round of nodes."""
        await asyncio.sleep(seconds)

    async def _once(self, method: str, path: str, data: bytes | None, extra_time: float) -> Any:
        assert self._session is not None
        timeout = aiohttp.ClientTimeout(total=self._timeout + extra_time)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        headers |= self._auth
        try:
            async with self._session.request(
                method, self.url + path, data=data, headers=headers, timeout=timeout
            ) as response:
                raw = await response.read()
                status = response.status
                retry_after = response.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise BackendUnavailable(f"cannot reach {self.url}: {exc!r}", retry_after=0) from exc
        body = msgspec.json.decode(raw) if raw else None
        if status >= 400:
            _raise(status, body, retry_after)
        return body


def _raise(status: int, body: Any, retry_after: str | None) -> None:
    if isinstance(body, dict) and "error" in body:
        err = error_for_code(str(body["error"]), str(body.get("message", "")), status)
    else:
        err = error_for_code("HTTP_ERROR", f"HTTP {status}", status)
    if isinstance(err, RetryLater) and retry_after and retry_after.isdigit():
        err.retry_after = int(retry_after)
    raise err
