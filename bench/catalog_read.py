"""A whole read of a large catalog: what a node starting beside a million queues does
first, and every process every ten minutes all the same.

    python -m bench.catalog_read [--queues 1000000]

Writes ``--queues`` queue records (default settings) into a fresh LMDB store,
then times two whole reads by one catalog: the first decodes every record, the
second finds them all unchanged. Both run on the event loop in chunks; the
longest the loop went without a turn meanwhile (what a heartbeat due then
waits) is reported too, while 16 creators keep the store's writer busy as
clients creating queues would.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import tempfile
import time
from pathlib import Path

from bench.many import tenant
from bench.options import options
from dynamiq.core.catalog import Catalog
from dynamiq.core.catalog.codec import encode_queue
from dynamiq.core.clock import MonotonicClock
from dynamiq.models import QueueRecord, QueueSettings
from dynamiq.storage.lmdb import LmdbBackend

BATCH = 20_000  # records written per commit


async def _run(queues: int, data: Path) -> None:
    store = LmdbBackend(data, map_size=16 << 30)
    try:
        settings = QueueSettings()
        for start in range(0, queues, BATCH):
            names = [tenant(i) for i in range(start, min(queues, start + BATCH))]
            await store.meta_put(
                {
                    f"q/{name}": encode_queue(QueueRecord(name, secrets.token_hex(8), settings))
                    for name in names
                }
            )
        catalog = Catalog(store, MonotonicClock())
        for which in ("first (every record decoded)", "again (nothing changed)"):
            busy = [asyncio.create_task(_create(store, f"busy{n}-")) for n in range(16)]
            stalls = asyncio.create_task(_longest_stall())
            began = time.perf_counter()
            await catalog.reload()
            took = time.perf_counter() - began
            stalls.cancel()
            for task in busy:
                task.cancel()
            await asyncio.gather(*busy, stalls, return_exceptions=True)
            print(
                f"{queues:,} queues, whole read {which}: {took:.1f} s;"
                f" the loop's longest wait for a turn {stalls.result() * 1000:.0f} ms"
            )
    finally:
        await store.close()


async def _create(store: LmdbBackend, prefix: str) -> None:
    """Create queue records one at a time, each in its own write, until cancelled."""
    settings = QueueSettings()
    for n in itertools.count():
        name = f"{prefix}{n}"
        record = encode_queue(QueueRecord(name, secrets.token_hex(8), settings))
        await store.meta_create(f"q/{name}", record)


async def _longest_stall() -> float:
    """Wake every millisecond until cancelled; return the longest time between turns."""
    longest, last = 0.0, time.perf_counter()
    with contextlib.suppress(asyncio.CancelledError):
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            longest, last = max(longest, now - last), now
    return longest


def main() -> None:
    parser = options(__doc__, queues=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_run(args.queues, Path(tmp)))


if __name__ == "__main__":
    main()
