"""Riak KV adapter over its HTTP API (aiohttp), in the original Dynamiq's layout.

Layout (bucket types are created with ``riak-admin``, see ``setup.sh --riak``):

- Messages: bucket type ``messages``, one bucket per queue incarnation, the
  id as the key and as the 2i integer index ``id_int``; range scans are
  paginated 2i queries with ``max_results`` (sorted pages). Writes ask for
  ``w=quorum&dw=quorum`` (a quorum of vnodes wrote it durably) and never
  overwrite (``If-None-Match: *``).
- Configuration: bucket type ``maps`` (datatype map), bucket ``config``: one
  map whose registers are the ``meta`` keys (values base64). Concurrent
  updates merge as the CRDT says; a conditional create is a read then an
  update with its causal context, so two nodes creating the same name at
  the same instant may both succeed (last writer wins).
- Depth: a counter per bucket in the map ``counts/<bucket>`` (type ``maps``),
  moved by the writes of a batch that succeeded, even when the batch as a
  whole failed; it can drift only if this node dies between a write and its
  count, or a write cancelled in flight was applied after all.

Every store call answers within ``timeout`` seconds: waiting for one of the
``pool_size`` connections counts against it, and the first request of a
batch to fail cancels the others (a paused Riak must not hold every slot).

Siblings are resolved, never re-enqueued: a message with a deleted sibling is
gone (the delete wins), otherwise any sibling (they hold the same record).
Several nodes (``core.riaknodes``) are tried in turn; when none answers,
``BackendUnavailable``.

Tested against Riak KV 3.2 only where ``DYNAMIQ_RIAK_URL`` names a node; 2i
needs the leveled, leveldb or memory backend.
"""

from __future__ import annotations

import asyncio
import base64
import email
import email.policy
import functools
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

import aiohttp

from dynamiq.errors import BackendUnavailable
from dynamiq.keyspace import ID_MAX, KeyRange

__all__ = ["HttpTransport", "RiakBackend", "RiakRequest", "Transport"]

T = TypeVar("T")

PAGE = 1000
DURABLE = {"w": "quorum", "dw": "quorum"}
TIMEOUT_SECONDS = 5.0

Answer = tuple[int, dict[str, str], bytes]  # status, headers, body


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
            return response.status, dict(response.headers), await response.read()

    async def close(self) -> None:
        """Close the session; idempotent."""
        if self._session is not None:
            await self._session.close()
            self._session = None


class RiakBackend:
    """A StorageBackend on one or more Riak KV nodes (``http://host:8098``)."""

    def __init__(
        self,
        nodes: Sequence[str],
        pool_size: int = 16,
        namespace: str = "",
        timeout: float = TIMEOUT_SECONDS,
        transport: Transport | None = None,
    ) -> None:
        if not nodes:
            raise ValueError("at least one Riak node is needed")
        self._nodes = [n.rstrip("/") for n in nodes]
        self._current = 0
        self._ns = namespace
        self._slots = asyncio.Semaphore(pool_size)
        self._timeout = timeout
        self._transport = transport or HttpTransport(pool_size)
        self._commits = 0
        self._commit_seconds = 0.0

    # -- messages --------------------------------------------------------------

    async def insert(self, items: Sequence[tuple[str, int, bytes]]) -> list[bool]:
        """Create objects that do not exist yet; per item, whether it was stored."""
        started = time.perf_counter()

        async def put(bucket: str, key: int, value: bytes) -> bool:
            status, _, _ = await self._call(
                "PUT",
                self._key_path(bucket, key),
                params=DURABLE,
                data=value,
                headers={
                    "Content-Type": "application/octet-stream",
                    "x-riak-index-id_int": str(key),
                    "If-None-Match": "*",
                },
                ok=(200, 204, 412),
            )
            return status != 412

        done: dict[int, bool] = {}
        try:
            stored = await self._each([functools.partial(put, *item) for item in items], done)
        finally:  # a batch that failed partway counts what it wrote
            added = Counter(items[i][0] for i, ok in done.items() if ok)
            for bucket, n in added.items():
                await self._count_add(bucket, n)
        self._commits += 1
        self._commit_seconds += time.perf_counter() - started
        return stored

    async def get(self, bucket: str, keys: Sequence[int]) -> list[bytes | None]:
        """Return each key's value (siblings resolved), None where absent or deleted."""
        return await self._each([functools.partial(self._get_one, bucket, k) for k in keys])

    async def _get_one(self, bucket: str, key: int) -> bytes | None:
        status, headers, body = await self._call(
            "GET",
            self._key_path(bucket, key),
            headers={"Accept": "multipart/mixed, */*;q=0.5"},
            ok=(200, 300, 404),
        )
        if status == 404:
            return None
        if status == 200:
            return None if headers.get("X-Riak-Deleted") else body
        siblings = _siblings(headers.get("Content-Type", ""), body)
        if any(deleted for deleted, _ in siblings):
            return None  # a delete raced a write: the delete wins
        live = [value for _, value in siblings]
        return live[0] if live else None

    async def delete(self, bucket: str, keys: Sequence[int]) -> list[bool]:
        """Delete keys; per key, whether it existed (a key repeated counts once)."""
        started = time.perf_counter()
        first = {k: i for i, k in reversed(list(enumerate(keys)))}

        async def remove(key: int) -> bool:
            status, _, _ = await self._call(
                "DELETE", self._key_path(bucket, key), params=DURABLE, ok=(204, 404)
            )
            return status == 204

        unique = list(first)
        done: dict[int, bool] = {}
        try:
            removed = await self._each([functools.partial(remove, k) for k in unique], done)
        finally:  # a batch that failed partway counts what it deleted
            gone = sum(done.values())
            if gone:
                await self._count_add(bucket, -gone)
        existed = dict(zip(unique, removed, strict=True))
        out = [existed[k] and first[k] == i for i, k in enumerate(keys)]
        self._commits += 1
        self._commit_seconds += time.perf_counter() - started
        return out

    async def scan(
        self, bucket: str, ranges: Sequence[KeyRange], limit: int | Sequence[int]
    ) -> list[list[int]]:
        """Return, per inclusive range, its first keys in ascending order (one 2i page each)."""
        limits = [limit] * len(ranges) if isinstance(limit, int) else list(limit)

        async def page(lo: int, hi: int, n: int) -> list[int]:
            if n <= 0:
                return []
            keys, _ = await self._index_page(bucket, lo, hi, n, None)
            return keys

        return await self._each(
            [functools.partial(page, lo, hi, n) for (lo, hi), n in zip(ranges, limits, strict=True)]
        )

    async def _index_page(
        self, bucket: str, lo: int, hi: int, n: int, continuation: str | None
    ) -> tuple[list[int], str | None]:
        params = {"max_results": str(n)}
        if continuation:  # never an empty continuation: Riak answers 500
            params["continuation"] = continuation
        path = f"/types/messages/buckets/{self._bucket(bucket)}/index/id_int/{lo}/{hi}"
        _, _, body = await self._call("GET", path, params=params, ok=(200,))
        data = json.loads(body)
        return sorted(int(k) for k in data.get("keys", [])), data.get("continuation")

    async def count(self, bucket: str) -> int:
        """Return the bucket's counter (moved by every insert and delete)."""
        value, _ = await self._map("counts", self._bucket(bucket))
        return max(0, int(value.get("n_counter", 0)))

    async def drop(self, bucket: str) -> None:
        """Delete every message of the bucket, page by page, then its counter."""
        continuation: str | None = None
        while True:
            keys, continuation = await self._index_page(bucket, 0, ID_MAX, PAGE, continuation)
            if keys:
                await self.delete(bucket, keys)
            if not continuation:
                break
        await self._call(
            "DELETE",
            f"/types/maps/buckets/counts/keys/{quote(self._bucket(bucket), safe='')}",
            ok=(204, 404),
        )

    async def _count_add(self, bucket: str, delta: int) -> None:
        await self._update_map("counts", self._bucket(bucket), {"update": {"n_counter": delta}})

    # -- configuration (one CRDT map of registers) -----------------------------

    async def meta_get(self, key: str) -> bytes | None:
        """Return a configuration value, None if absent."""
        return (await self.meta_scan(key)).get(key)

    async def meta_scan(self, prefix: str) -> dict[str, bytes]:
        """Return every configuration entry whose key starts with ``prefix``."""
        value, _ = await self._map("config", self._meta())
        out: dict[str, bytes] = {}
        for field, raw in value.items():
            if field.endswith("_register") and field[: -len("_register")].startswith(prefix):
                out[field[: -len("_register")]] = base64.b64decode(raw)
        return out

    async def meta_create(self, key: str, value: bytes) -> bool:
        """Store a value if the key is absent (read, then update with its context)."""
        current, context = await self._map("config", self._meta())
        if f"{key}_register" in current:
            return False
        update: dict[str, Any] = {"update": {f"{key}_register": _b64(value)}}
        if context:
            update["context"] = context
        await self._update_map("config", self._meta(), update)
        return True

    async def meta_put(self, entries: dict[str, bytes]) -> None:
        """Store configuration values, overwriting."""
        if entries:
            update = {"update": {f"{k}_register": _b64(v) for k, v in entries.items()}}
            await self._update_map("config", self._meta(), update)

    async def meta_delete(self, keys: Sequence[str]) -> int:
        """Remove configuration keys (with the map's context); return how many existed."""
        current, context = await self._map("config", self._meta())
        present = sorted({f"{k}_register" for k in keys} & set(current))
        if present:
            await self._update_map("config", self._meta(), {"remove": present, "context": context})
        return len(present)

    async def _map(self, bucket: str, key: str) -> tuple[dict[str, Any], str | None]:
        status, _, body = await self._call(
            "GET", self._map_path(bucket, key), params={"include_context": "true"}, ok=(200, 404)
        )
        if status == 404:
            return {}, None
        data = json.loads(body)
        return dict(data.get("value") or {}), data.get("context")

    async def _update_map(self, bucket: str, key: str, operation: dict[str, Any]) -> None:
        await self._call(
            "POST",
            self._map_path(bucket, key),
            params=DURABLE,
            data=json.dumps(operation).encode(),
            headers={"Content-Type": "application/json"},
            ok=(200, 204),
        )

    # -- housekeeping ----------------------------------------------------------

    def commit_stats(self) -> tuple[int, float]:
        """Return (write batches, seconds spent in them)."""
        return self._commits, self._commit_seconds

    async def maintain(self) -> None:
        """Nothing to do: Riak keeps itself."""

    async def close(self) -> None:
        """Close the connection pool; idempotent."""
        await self._transport.close()

    # -- HTTP ------------------------------------------------------------------

    def _bucket(self, bucket: str) -> str:
        return f"{self._ns}{bucket}"

    def _meta(self) -> str:
        return f"{self._ns}meta"

    def _key_path(self, bucket: str, key: int) -> str:
        return f"/types/messages/buckets/{quote(self._bucket(bucket), safe='')}/keys/{key}"

    @staticmethod
    def _map_path(bucket: str, key: str) -> str:
        return f"/types/maps/buckets/{bucket}/datatypes/{quote(key, safe='')}"

    async def _each(
        self, calls: list[Callable[[], Awaitable[T]]], done: dict[int, T] | None = None
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
            async with asyncio.timeout(self._timeout):
                for finished in asyncio.as_completed(tasks):
                    await finished
        except BackendUnavailable as exc:
            failure = exc
        except TimeoutError:
            failure = BackendUnavailable(f"Riak did not answer within {self._timeout:g} s")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if failure is not None:
            raise failure
        return [done[i] for i in range(len(calls))]

    async def _call(
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
            async with asyncio.timeout(self._timeout):
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
            last = f"no answer within {self._timeout:g} s"
        raise BackendUnavailable(f"no Riak node answered ({last})")


def _siblings(content_type: str, body: bytes) -> list[tuple[bool, bytes]]:
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


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()
