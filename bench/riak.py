"""The Riak adapter beside raw HTTP requests to the same Riak node, in one run.

Raw: ``concurrency`` requests in flight, each one object of ``size`` bytes
written as the adapter writes messages (bucket type ``messages``, the 2i
index, ``w=dw=quorum``): plain PUTs, conditional PUTs (``If-None-Match: *``,
the adapter's create), GETs and DELETEs. Adapter: the queue engine on
``RiakBackend``, ``concurrency`` publishers of one message each, then (once
the node's memory of its publishes has lapsed, so every delivery reads
Riak) ``concurrency`` consumers receiving 10 and deleting them. Targets:
publish at least 0.8x the raw PUT rate; receive + delete at least 0.8x of
what one GET plus one DELETE per message allows, ``1 / (1/get + 1/delete)``.

    DYNAMIQ_RIAK_URL=http://127.0.0.1:8098 .venv/bin/python -m bench.riak --n 2000
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from bench.options import options
from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import Clock, MonotonicClock
from dynamiq.core.queues import QueueService
from dynamiq.storage.riak import HttpTransport, RiakBackend, RiakRequest, Transport

__all__ = ["CountingTransport", "measure"]

DURABLE = {"w": "quorum", "dw": "quorum"}
READ_LIMIT = 10
FORGOTTEN_AFTER_SECONDS = 1.5  # the node serves its own publishes from memory for 1 s

Job = Callable[[], Awaitable[object]]


class CountingTransport:
    """A transport that counts the requests passing through it, by kind."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.counts: Counter[str] = Counter()

    async def __call__(self, request: RiakRequest) -> tuple[int, dict[str, str], bytes]:
        """Count, then send."""
        kind = "index" if "/index/" in request.url else request.method
        if "/datatypes/" in request.url:
            kind = "counter " + request.method
        self.counts[kind] += 1
        return await self.inner(request)

    async def close(self) -> None:
        """Close the inner transport."""
        await self.inner.close()


async def _timed(jobs: list[Job], concurrency: int) -> float:
    """Run ``jobs`` with ``concurrency`` in flight; return jobs per second."""
    queue = list(reversed(jobs))

    async def worker() -> None:
        while queue:
            await queue.pop()()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return len(jobs) / (time.perf_counter() - started)


async def measure_raw(
    transport: Transport, url: str, n: int, size: int, concurrency: int
) -> dict[str, float]:
    """Return raw requests per second: put, conditional put, get, delete."""
    bucket = f"bench-raw-{secrets.token_hex(4)}"
    body = os.urandom(size)

    def request(method: str, key: int, conditional: bool = False) -> Job:
        headers = {"Content-Type": "application/octet-stream", "x-riak-index-id_int": str(key)}
        if conditional:
            headers["If-None-Match"] = "*"
        data = body if method == "PUT" else None

        async def send() -> object:
            path = f"{url}/types/messages/buckets/{bucket}/keys/{key}"
            status, _, _ = await transport(RiakRequest(method, path, DURABLE, data, headers))
            if status >= 300:
                raise RuntimeError(f"{method} {path}: HTTP {status}")
            return status

        return send

    return {
        "put": await _timed([request("PUT", k) for k in range(n)], concurrency),
        "conditional put": await _timed(
            [request("PUT", k, conditional=True) for k in range(n, 2 * n)], concurrency
        ),
        "get": await _timed([request("GET", k) for k in range(n)], concurrency),
        "delete": await _timed([request("DELETE", k) for k in range(2 * n)], concurrency),
    }


async def measure_adapter(
    transport: CountingTransport, url: str, n: int, size: int, concurrency: int, clock: Clock
) -> dict[str, float]:
    """Return the engine's publish and receive+delete rates on Riak, and requests per message."""
    namespace = f"bench-{secrets.token_hex(4)}-"
    store = RiakBackend([url], concurrency, namespace, transport=transport)
    catalog = Catalog(store)
    await catalog.create_queue("q")
    queues = QueueService(store, catalog, clock)
    body = os.urandom(size)

    async def publish() -> object:
        return await queues.publish("q", [body])

    try:
        published = await _timed([publish] * n, concurrency)
        await asyncio.sleep(FORGOTTEN_AFTER_SECONDS)
        transport.counts.clear()
        delivered = 0

        async def consume() -> None:
            nonlocal delivered
            while delivered < n:
                got = await queues.receive("q", READ_LIMIT, wait_seconds=0.5)
                if not got:
                    return
                delivered += len(got)
                await queues.delete("q", [m.id for m in got])

        started = time.perf_counter()
        await asyncio.gather(*(consume() for _ in range(concurrency)))
        drained = delivered / (time.perf_counter() - started)
        per_message = {
            f"{kind} per message": c / max(1, delivered) for kind, c in transport.counts.items()
        }
        return {"publish": published, "receive+delete": drained, **per_message}
    finally:
        await catalog.delete_queue("q")
        await store.close()


async def measure(
    url: str, n: int, size: int, concurrency: int, transport: Transport | None = None
) -> dict[str, float]:
    """Run both halves against one node and return every figure and ratio."""
    inner = transport or HttpTransport(concurrency)
    counting = CountingTransport(inner)
    raw = await measure_raw(inner, url, n, size, concurrency)
    ours = await measure_adapter(counting, url, n, size, concurrency, MonotonicClock())
    allowed = 1 / (1 / raw["get"] + 1 / raw["delete"])
    await inner.close()
    return {
        **{f"raw {k}/s": v for k, v in raw.items()},
        "one get + one delete/s": allowed,
        **{f"adapter {k}" + ("/s" if "per" not in k else ""): v for k, v in ours.items()},
        "publish / raw put": ours["publish"] / raw["put"],
        "publish / raw conditional put": ours["publish"] / raw["conditional put"],
        "receive+delete / one get + one delete": ours["receive+delete"] / allowed,
    }


def main(argv: list[str] | None = None) -> int:
    """Print the figures as a table and as one JSON line."""
    parser = options(__doc__)
    parser.add_argument("--url", default=os.environ.get("DYNAMIQ_RIAK_URL", ""))
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)
    if not args.url:
        print("set DYNAMIQ_RIAK_URL (or --url) to a Riak KV node", file=sys.stderr)
        return 2
    url = args.url.split(",")[0].rstrip("/")
    figures = asyncio.run(measure(url, args.n, args.size, args.concurrency))
    for name, value in figures.items():
        print(f"{name:<42} {value:>10.2f}")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
