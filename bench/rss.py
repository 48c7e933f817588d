"""Node memory against queue depth: RSS with 10k, 100k and 1M queued messages.

    python -m bench.rss [--top 1000000]

Starts a node on a scratch directory, warms it up with as many messages as
the deepest level, published and consumed (so that what is measured is
depth, not the allocator's warm-up),
fills one queue with 1 KB messages
(receiving and deleting a batch at each level so the receive path's state is
in memory too), waits for one upkeep round, and prints the node's VmRSS with
its anonymous and file-backed parts (summed over the node's processes: with
workers, each maps the store). File-backed pages are the LMDB map,
which the kernel can drop at any time and which each upkeep round unmaps;
anonymous memory is the process's own.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile

from bench.options import options
from bench.procs import memory_mib
from dynamiq.client import AsyncClient

SETTLE_SECONDS = 10.5  # one upkeep round (2 s) and one memory trim (10 s)


def _status(pid: int) -> dict[str, int]:
    return {key: round(memory_mib(pid, key)) for key in ("VmRSS", "RssAnon", "RssFile")}


async def _fill(url: str, pid: int, levels: list[int]) -> list[tuple[int, dict[str, int]]]:
    body = '{"pad":"' + "x" * 1012 + '"}'
    rows = []
    async with AsyncClient(url) as client:
        await client.create_queue("rss", visibility_timeout=600)
        # Warm up: as many messages through the node as the deepest level, so
        # that the allocator's high-water mark is reached before measuring.
        for _ in range(levels[-1] // 10_000):
            for _ in range(10):
                await asyncio.gather(*(client.publish("rss", [body] * 100) for _ in range(10)))
            while got := await client.receive("rss", 100):
                await client.delete("rss", [m.id for m in got])
        depth = 0
        for level in levels:
            while depth < level:
                k = min(10_000, level - depth)
                await asyncio.gather(
                    *(client.publish("rss", [body] * 100) for _ in range(k // 100))
                )
                depth += k
            got = await client.receive("rss", 100)
            await client.delete("rss", [m.id for m in got])
            await client.publish("rss", [body] * len(got))
            await asyncio.sleep(SETTLE_SECONDS)  # upkeep: storage.maintain, malloc_trim
            rows.append((level, _status(pid)))
        # Then drain it all: what stays is not held for the messages.
        while got := await client.receive("rss", 100):
            await client.delete("rss", [m.id for m in got])
        await asyncio.sleep(SETTLE_SECONDS)
        rows.append((0, _status(pid)))
    return rows


def main() -> None:
    """Fill a queue level by level and print the node's memory at each."""
    ap = options(__doc__, top=1_000_000, port=18182)
    args = ap.parse_args()
    levels = [lvl for lvl in (10_000, 100_000, 1_000_000) if lvl <= args.top]
    with tempfile.TemporaryDirectory() as tmp:
        node = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dynamiq",
                "serve",
                "--storage-path",
                tmp,
                "--core-httpport",
                str(args.port),
                "--core-loglevelstring",
                "warn",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert node.stdout is not None
            url = node.stdout.readline().split("serving ")[1].split(";")[0]
            rows = asyncio.run(_fill(url, node.pid, levels))
        finally:
            node.terminate()
            node.wait(30)
    print("queued      VmRSS MB   RssAnon MB   RssFile MB")
    for level, mem in rows:
        print(f"{level:>9,} {mem['VmRSS']:>10} {mem['RssAnon']:>12} {mem['RssFile']:>12}")
    first, last = rows[0][1], rows[-2][1]
    print(
        f"anonymous memory {levels[-1]:,} / {levels[0]:,} queued: "
        f"{last['RssAnon'] / first['RssAnon']:.2f}x; VmRSS {last['VmRSS'] / first['VmRSS']:.2f}x"
    )


if __name__ == "__main__":
    main()
