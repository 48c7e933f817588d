"""What a durable commit takes on this disk, alone: the floor under a publish's latency.

    python -m bench.floor                 # 5,000 commits in a directory under /tmp
    python -m bench.floor --dir DATA_DIR  # on the filesystem the node's data is on

Three timings, each of ``--commits`` in a row, nothing else running:

- ``fdatasync``: a 4 KB page rewritten and flushed, the disk's own flush;
- ``LMDB, as the node commits``: a write transaction of the latency phase's
  shape (two 1 KB messages put, two older ones deleted) committed with
  ``sync`` and ``metasync``, as the store opens its environment. LMDB flushes
  the data pages, then writes the meta page synchronously: two flushes, in
  that order, so that a power cut leaves either commit whole;
- ``LMDB, meta page not synced``: the same with ``metasync`` off (one flush).
  Not a setting of the node: a power cut may undo the last commit.

A publish is answered after such a commit, so these percentiles bound the
node's publish-to-receive latency from below, whatever its HTTP costs.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import lmdb

from bench.options import options

__all__ = ["main", "percentiles"]

BODY = 1024
PAGE = 4096


def percentiles(seconds: list[float]) -> dict[str, float]:
    """p50, p90, p99 and p99.9 of ``seconds``, in milliseconds."""
    ordered = sorted(seconds)
    last = len(ordered) - 1
    return {
        name: ordered[min(last, int(q * len(ordered)))] * 1e3
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999))
    }


def _timed(step: Callable[[int], None], count: int) -> list[float]:
    out = []
    for i in range(count):
        start = time.perf_counter()
        step(i)
        out.append(time.perf_counter() - start)
    return out


def flushes(where: Path, count: int) -> list[float]:
    """``count`` rewrites of one page, each flushed with ``fdatasync``."""
    fd = os.open(where / "flush", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.pwrite(fd, b"\0" * PAGE * 64, 0)
        os.fsync(fd)

        def step(i: int) -> None:
            os.pwrite(fd, os.urandom(PAGE), (i % 64) * PAGE)
            os.fdatasync(fd)

        return _timed(step, count)
    finally:
        os.close(fd)


def commits(where: Path, count: int, metasync: bool) -> list[float]:
    """``count`` LMDB commits of two puts and two deletes each."""
    env = lmdb.open(str(where), map_size=1 << 30, max_dbs=2, sync=True, metasync=metasync)
    try:
        db = env.open_db(b"messages")

        def step(i: int) -> None:
            with env.begin(write=True, db=db) as txn:
                for k in (2 * i, 2 * i + 1):
                    txn.put(k.to_bytes(8, "big"), os.urandom(BODY))
                    if k >= 8:
                        txn.delete((k - 8).to_bytes(8, "big"))

        return _timed(step, count)
    finally:
        env.close()


def main(argv: list[str] | None = None) -> None:
    ap = options(__doc__)
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: /tmp)")
    ap.add_argument("--commits", type=int, default=5000)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dynamiq-floor-", dir=args.dir) as scratch:
        root = Path(scratch)
        (root / "two").mkdir()
        (root / "one").mkdir()
        rows = [
            ("fdatasync of a 4 KB page", flushes(root, args.commits)),
            ("LMDB, as the node commits (2 flushes)", commits(root / "two", args.commits, True)),
            ("LMDB, meta page not synced (1 flush)", commits(root / "one", args.commits, False)),
        ]
    print(f"{args.commits} in a row, ms:")
    print(f"{'':40} {'p50':>7} {'p90':>7} {'p99':>7} {'p99.9':>7}")
    for name, seconds in rows:
        p = percentiles(seconds)
        print(f"{name:40} " + " ".join(f"{p[k]:7.3f}" for k in ("p50", "p90", "p99", "p99.9")))


if __name__ == "__main__":
    main()
