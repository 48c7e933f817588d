"""RiakBackend: the storage port on Riak KV's HTTP API, in the original Dynamiq's layout.

Round trips per delivered message (what Riak's HTTP resource does with each
request, read from ``riak_kv_wm_object`` and ``riak_kv_delete``):

- publish: one PUT with ``If-None-Match: *`` per message (Riak reads the key
  before writing it: the conditional create that keeps two processes from
  writing the same id); it returns the object's vector clock, kept;
- receive: one 2i query over a partition's whole span first (most of its
  stripes hold few keys), one more per stripe only where that page did not
  reach; then one GET per message not published through this node in the
  last second (those are served from memory); then one PUT per message with
  its receive count raised, carrying the clock the publish or the GET
  returned;
- delete: one DELETE carrying the ``X-Riak-Vclock`` the receive's GET
  returned, so Riak writes the tombstone without reading the object first
  (without a vclock it reads it: a second GET per message). Riak's own
  tombstone reaper still reads the key once after answering.
- depth counters: about one update per bucket per round trip (``depths``);
  a bucket written with an unknown outcome is recounted from its keys
  (``recount``).
"""

from __future__ import annotations

import base64
import bisect
import functools
import json
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import quote

from dynamiq.errors import BackendUnavailable
from dynamiq.keyspace import ID_MAX, KeyRange
from dynamiq.storage.base import (
    Census,
    Claimed,
    Span,
    census_by_scans,
    claim_record,
    held_claim,
    insert_claimed_in_steps,
    move_in_steps,
)
from dynamiq.storage.riak.depths import DepthDeltas
from dynamiq.storage.riak.http import HttpTransport, RiakHttp, Transport, siblings
from dynamiq.storage.riak.recount import Recounts

__all__ = ["RiakBackend"]

PAGE = 1000
SPAN_RANGES = 16  # ranges read as one 2i page before any gets a query of its own
DURABLE = {"w": "quorum", "dw": "quorum"}
# A write that answers with the object's new vector clock (and, alas, its body).
RETURN_CLOCK = {**DURABLE, "returnbody": "true"}
TIMEOUT_SECONDS = 5.0
# Vector clocks kept from receive GETs for the deletes that follow (about
# 100 bytes each); a delete whose clock was forgotten costs Riak a read.
VCLOCKS = 65_536


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
        self._http = RiakHttp(nodes, pool_size, timeout, transport or HttpTransport(pool_size))
        self._ns = namespace
        self._depths = DepthDeltas(self._count_add)
        self._recounts = Recounts(self._counter, self._key_count, self._count_add)
        self._vclocks: OrderedDict[tuple[str, int], str] = OrderedDict()
        self._commits = 0
        self._commit_seconds = 0.0

    # -- messages --------------------------------------------------------------

    async def insert(self, items: Sequence[tuple[str, int, bytes]]) -> list[bool]:
        """Create objects that do not exist yet; per item, whether it was stored."""
        started = time.perf_counter()

        async def put(bucket: str, key: int, value: bytes) -> bool:
            status, answer, _ = await self._http.call(
                "PUT",
                self._key_path(bucket, key),
                params=RETURN_CLOCK,
                data=value,
                headers={
                    "Content-Type": "application/octet-stream",
                    "x-riak-index-id_int": str(key),
                    "If-None-Match": "*",
                },
                ok=(200, 204, 412),
            )
            if vclock := answer.get("x-riak-vclock"):
                self._remember(bucket, key, vclock)
            return status != 412

        done: dict[int, bool] = {}
        try:
            stored = await self._http.each([functools.partial(put, *item) for item in items], done)
        finally:  # a batch that failed partway counts what it wrote
            added = Counter(items[i][0] for i, ok in done.items() if ok)
            for bucket, n in added.items():
                self._depths.add(bucket, n)
            self._outcomes({bucket for bucket, _, _ in items}, len(done) < len(items))
        self._commits += 1
        self._commit_seconds += time.perf_counter() - started
        return stored

    async def get(self, bucket: str, keys: Sequence[int]) -> list[bytes | None]:
        """Return each key's value (siblings resolved), None where absent or deleted."""
        return await self._http.each([functools.partial(self._get_one, bucket, k) for k in keys])

    async def _get_one(self, bucket: str, key: int) -> bytes | None:
        status, headers, body = await self._http.call(
            "GET",
            self._key_path(bucket, key),
            headers={"Accept": "multipart/mixed, */*;q=0.5"},
            ok=(200, 300, 404),
        )
        if status == 404 or headers.get("x-riak-deleted"):
            return None
        if status == 200:
            value: bytes | None = body
        else:
            found = siblings(headers.get("content-type", ""), body)
            live = [v for deleted, v in found if not deleted]
            # A delete that raced a write wins; otherwise any sibling (same record).
            value = live[0] if live and len(live) == len(found) else None
        if value is not None and (vclock := headers.get("x-riak-vclock")):
            self._remember(bucket, key, vclock)
        return value

    def _remember(self, bucket: str, key: int, vclock: str) -> None:
        self._vclocks[bucket, key] = vclock
        self._vclocks.move_to_end((bucket, key))
        if len(self._vclocks) > VCLOCKS:
            self._vclocks.popitem(last=False)

    async def delete(self, bucket: str, keys: Sequence[int]) -> list[bool]:
        """Delete keys; per key, whether it existed (a key repeated counts once).

        A key read through this adapter is deleted with the vector clock its
        read returned; Riak then answers 204 without reading it again, even
        if another node deleted it meanwhile (the depth counter is then
        moved twice for it: a message deleted twice, through two nodes).
        """
        started = time.perf_counter()
        first = {k: i for i, k in reversed(list(enumerate(keys)))}

        async def remove(key: int) -> bool:
            vclock = self._vclocks.pop((bucket, key), None)
            status, _, _ = await self._http.call(
                "DELETE",
                self._key_path(bucket, key),
                params=DURABLE,
                headers={"X-Riak-Vclock": vclock} if vclock else None,
                ok=(204, 404),
            )
            return status == 204

        unique = list(first)
        done: dict[int, bool] = {}
        try:
            removed = await self._http.each([functools.partial(remove, k) for k in unique], done)
        finally:  # a batch that failed partway counts what it deleted
            self._depths.add(bucket, -sum(done.values()))
            self._outcomes({bucket}, len(done) < len(unique))
        existed = dict(zip(unique, removed, strict=True))
        out = [existed[k] and first[k] == i for i, k in enumerate(keys)]
        self._commits += 1
        self._commit_seconds += time.perf_counter() - started
        return out

    async def replace(self, bucket: str, items: Sequence[tuple[int, bytes]]) -> list[bool]:
        """Overwrite existing keys; per item, whether the key existed.

        Each PUT carries the vector clock the receive's GET returned (a key
        this adapter has not read is read first): a delete that raced the
        write becomes its sibling and wins on the next read. The PUT returns
        the new clock, kept for the delete that follows.
        """

        async def put(key: int, value: bytes) -> bool:
            vclock = self._vclocks.pop((bucket, key), None)
            if vclock is None:
                if await self._get_one(bucket, key) is None:
                    return False
                vclock = self._vclocks.pop((bucket, key), None)
            headers = {"Content-Type": "application/octet-stream", "x-riak-index-id_int": str(key)}
            if vclock:
                headers["X-Riak-Vclock"] = vclock
            _, answer, _ = await self._http.call(
                "PUT",
                self._key_path(bucket, key),
                params=RETURN_CLOCK,
                data=value,
                headers=headers,
                ok=(200, 204, 300),
            )
            if fresh := answer.get("x-riak-vclock"):
                self._remember(bucket, key, fresh)
            return True

        return await self._http.each([functools.partial(put, *item) for item in items])

    async def move(self, items: Sequence[tuple[str, int, str, int, bytes]]) -> list[bool | None]:
        """Move objects: the target created first, then the source deleted (at-least-once)."""
        return await move_in_steps(self, items)

    async def _claim(self, items: Sequence[Claimed], now_ms: int) -> list[bytes | None]:
        """Record claims unless a live one holds their key; per item None or its value.

        A conditional create; a claim found expired is overwritten with the
        clock its read returned. Two processes overwriting the same expired
        claim at once may both win (Riak has no compare-and-set here).
        Expired claims stay until they are claimed again.
        """

        async def one(key: str, value: bytes, expires_ms: int) -> bytes | None:
            path = self._claim_path(key)
            record = claim_record(value, expires_ms)
            headers = {"Content-Type": "application/octet-stream", "If-None-Match": "*"}
            status, _, _ = await self._http.call(
                "PUT", path, params=DURABLE, data=record, headers=headers, ok=(200, 204, 412)
            )
            if status != 412:
                return None
            status, answer, body = await self._http.call(
                "GET", path, headers={"Accept": "multipart/mixed, */*;q=0.5"}, ok=(200, 300, 404)
            )
            if status == 300:
                body = next(
                    (
                        v
                        for deleted, v in siblings(answer.get("content-type", ""), body)
                        if not deleted
                    ),
                    b"",
                )
            held = held_claim(body, now_ms) if status != 404 and body else None
            if held is not None:
                return held
            headers = {"Content-Type": "application/octet-stream"}
            if vclock := answer.get("x-riak-vclock"):
                headers["X-Riak-Vclock"] = vclock
            await self._http.call(
                "PUT", path, params=DURABLE, data=record, headers=headers, ok=(200, 204)
            )
            return None

        return await self._http.each([functools.partial(one, *item[3:6]) for item in items])

    async def insert_claimed(self, items: Sequence[Claimed], now_ms: int) -> list[bool | bytes]:
        """Insert, then claim (Riak writes one object at a time)."""
        return await insert_claimed_in_steps(self, self._claim, items, now_ms)

    async def scan(
        self, bucket: str, ranges: Sequence[KeyRange], limit: int | Sequence[int]
    ) -> list[list[int]]:
        """Return, per inclusive range, its first keys in ascending order.

        Neighbouring ranges are read together first, ``SPAN_RANGES`` to a 2i
        page over their whole span (most stripes hold few keys); a range is
        answered from its span's page when the page reached past its end or
        held enough of its keys. Only the others get a query of their own.
        """
        limits = [limit] * len(ranges) if isinstance(limit, int) else list(limit)
        out: list[list[int] | None] = [None if n > 0 else [] for n in limits]
        wanted = sorted((i for i, n in enumerate(limits) if n > 0), key=lambda i: ranges[i])
        spans = [wanted[k : k + SPAN_RANGES] for k in range(0, len(wanted), SPAN_RANGES)]
        spans = [span for span in spans if len(span) > 1]

        async def span_page(span: list[int]) -> tuple[list[int], str | None]:
            hi = max(ranges[i][1] for i in span)
            return await self._index_page(bucket, ranges[span[0]][0], hi, PAGE, None)

        pages = await self._http.each([functools.partial(span_page, span) for span in spans])
        for span, (keys, more) in zip(spans, pages, strict=True):
            reached = keys[-1] if more and keys else ID_MAX  # every key up to here was returned
            for i in span:
                first, last = ranges[i]
                got = keys[bisect.bisect_left(keys, first) : bisect.bisect_right(keys, last)]
                if len(got) >= limits[i] or last <= reached:
                    out[i] = got[: limits[i]]

        async def page(i: int) -> list[int]:
            keys, _ = await self._index_page(bucket, *ranges[i], limits[i], None)
            return keys

        rest = [i for i in wanted if out[i] is None]
        for i, keys in zip(
            rest, await self._http.each([functools.partial(page, i) for i in rest]), strict=True
        ):
            out[i] = keys
        return [keys or [] for keys in out]

    async def _index_page(
        self, bucket: str, lo: int, hi: int, n: int, continuation: str | None
    ) -> tuple[list[int], str | None]:
        params = {"max_results": str(n)}
        if continuation:  # never an empty continuation: Riak answers 500
            params["continuation"] = continuation
        path = f"/types/messages/buckets/{self._bucket(bucket)}/index/id_int/{lo}/{hi}"
        _, _, body = await self._http.call("GET", path, params=params, ok=(200,))
        data = json.loads(body)
        return sorted(int(k) for k in data.get("keys", [])), data.get("continuation")

    async def count(self, bucket: str) -> int:
        """Return the bucket's counter, once this node's queued deltas are in it."""
        return max(0, await self._counter(bucket))

    async def total(self) -> int | None:
        """None: the store keeps a count per bucket only, none over them all."""
        return None

    async def census(self, bucket: str, spans: Sequence[Span], cap: int) -> Census:
        """The bucket's count, and per span its first key and the keys after its cut."""
        return await census_by_scans(self, bucket, spans, cap)

    async def _counter(self, bucket: str) -> int:
        """The bucket's counter as stored (below 0 when it drifted), this node's queued
        deltas in it."""
        await self._depths.settle(bucket)
        value, _ = await self._map("counts", self._bucket(bucket))
        return int(value.get("n_counter", 0))

    async def _key_count(self, bucket: str) -> int:
        """How many keys the bucket holds, by its 2i pages."""
        return sum([len(keys) async for keys in self._pages(bucket)])

    async def _pages(self, bucket: str) -> AsyncIterator[list[int]]:
        """The bucket's keys, a 2i page at a time, in ascending order."""
        continuation: str | None = None
        while True:
            keys, continuation = await self._index_page(bucket, 0, ID_MAX, PAGE, continuation)
            yield keys
            if not continuation:
                return

    def _outcomes(self, buckets: set[str], unknown: bool) -> None:
        """Note writes to ``buckets``; some of them, with ``unknown`` outcomes, may have
        been made without moving the counter: recount those buckets."""
        for bucket in buckets:
            self._recounts.wrote(bucket)
            if unknown:
                self._recounts.unsure(bucket)

    async def drop(self, bucket: str) -> None:
        """Delete every message of the bucket, page by page, then its counter."""
        async for keys in self._pages(bucket):
            if keys:
                await self.delete(bucket, keys)
        self._recounts.forget(bucket)
        await self._depths.settle(bucket)
        await self._http.call(
            "DELETE",
            f"/types/maps/buckets/counts/keys/{quote(self._bucket(bucket), safe='')}",
            ok=(204, 404),
        )

    async def _count_add(self, bucket: str, delta: int) -> None:
        try:
            operation = {"update": {"n_counter": delta}}
            await self._update_map("counts", self._bucket(bucket), operation)
        except BackendUnavailable:  # it may have been applied: sent again, it counts twice
            self._recounts.unsure(bucket)
            raise

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

    async def meta_put(self, entries: dict[str, bytes], delete: Sequence[str] = ()) -> None:
        """Store configuration values, overwriting, then delete ``delete``."""
        if entries:
            update = {"update": {f"{k}_register": _b64(v) for k, v in entries.items()}}
            await self._update_map("config", self._meta(), update)
        if delete:
            await self.meta_delete(delete)

    async def meta_delete(self, keys: Sequence[str]) -> int:
        """Remove configuration keys (with the map's context); return how many existed."""
        current, context = await self._map("config", self._meta())
        present = sorted({f"{k}_register" for k in keys} & set(current))
        if present:
            await self._update_map("config", self._meta(), {"remove": present, "context": context})
        return len(present)

    async def _map(self, bucket: str, key: str) -> tuple[dict[str, Any], str | None]:
        status, _, body = await self._http.call(
            "GET", self._map_path(bucket, key), params={"include_context": "true"}, ok=(200, 404)
        )
        if status == 404:
            return {}, None
        data = json.loads(body)
        return dict(data.get("value") or {}), data.get("context")

    async def _update_map(self, bucket: str, key: str, operation: dict[str, Any]) -> None:
        await self._http.call(
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
        """Send the depth deltas a failure left queued, and recount the buckets whose
        counter may be off (``recount``); Riak keeps itself."""
        self._depths.retry()
        await self._recounts.run()

    async def close(self) -> None:
        """Send the queued depth deltas, close the connection pool; idempotent."""
        await self._depths.close()
        await self._http.close()

    # -- paths -----------------------------------------------------------------

    def _bucket(self, bucket: str) -> str:
        return f"{self._ns}{bucket}"

    def _meta(self) -> str:
        return f"{self._ns}meta"

    def _key_path(self, bucket: str, key: int) -> str:
        return f"/types/messages/buckets/{quote(self._bucket(bucket), safe='')}/keys/{key}"

    def _claim_path(self, key: str) -> str:
        return (
            f"/types/messages/buckets/{quote(self._ns, safe='')}claims/keys/{quote(key, safe='')}"
        )

    @staticmethod
    def _map_path(bucket: str, key: str) -> str:
        return f"/types/maps/buckets/{bucket}/datatypes/{quote(key, safe='')}"


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()
