"""Workload W1 against a Dynamiq node, beside the raw store and the peers, in one run.

    python -m bench.w1 [--n 100000] [--reps 3] [--peers redis-always,rabbitmq-quorum]

1. The ceiling: W1's shape in-process on the raw LMDB store, and on the engine
   without HTTP (``bench.ceiling``).
2. The daemon and the peers through the shared W1 driver
   (``../shared/peers/peers.py`` with ``bench/peers_plugin.py``): publish,
   receive+delete and concurrent end-to-end msgs/s, publish-to-receive latency
   at 2,000 msg/s with long polling, and each server's peak RSS.
3. The ratios: daemon / ceiling, and every system / ``--ratio-to``.

The peers need their servers installed (see ``../shared/peers/README.md``);
``--peers none`` measures the daemon alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.ceiling import Rates, measure_engine, measure_store

ROOT = Path(__file__).resolve().parents[1]
PEERS = Path(os.environ.get("DYNAMIQ_PEERS", ROOT.parent / "shared" / "peers" / "peers.py"))


def _ceiling(n: int, size: int, batch: int, window: int) -> dict[str, Rates]:
    async def both() -> dict[str, Rates]:
        return {
            "store": await measure_store(n, size, batch, window),
            "engine": await measure_engine(n, size, batch, window),
        }

    return asyncio.run(both())


def _print_ceiling(levels: dict[str, Rates]) -> None:
    print("in-process ceiling (no HTTP)     pub msg/s   cons msg/s    e2e msg/s")
    for name, r in levels.items():
        print(f"  {name:<28} {r.pub:>11,.0f} {r.cons:>12,.0f} {r.e2e:>12,.0f}")


def run_driver(args: argparse.Namespace, out: Path) -> dict[str, dict[str, float]]:
    systems = ["dynamiq"] + [p for p in args.peers.split(",") if p and p != "none"]
    cmd = [
        sys.executable,
        str(PEERS),
        *systems,
        "--manage",
        "--plugin",
        str(ROOT / "bench" / "peers_plugin.py"),
        "--n",
        str(args.n),
        "--reps",
        str(args.reps),
        "--json",
        str(out),
    ]
    if len(systems) > 1:
        cmd += ["--ratio-to", args.ratio_to or systems[1]]
    subprocess.run(cmd, check=True, cwd=PEERS.parent)
    summary = json.loads(out.read_text())["summary"]
    return {s["system"]: s for s in summary}


def main() -> None:
    """Run the ceiling, then W1 through the peers driver, and print the ratios."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--peers",
        default="redis-always,rabbitmq-quorum",
        help="comma list of peers.py systems, or none",
    )
    ap.add_argument("--ratio-to", default=None)
    args = ap.parse_args()
    if not PEERS.exists():
        sys.exit(f"bench.w1: the W1 driver is not at {PEERS} (set DYNAMIQ_PEERS)")
    levels = _ceiling(args.n, 1024, 100, 1000)
    _print_ceiling(levels)
    with tempfile.TemporaryDirectory() as tmp:
        results = run_driver(args, Path(tmp) / "w1.json")
    ours = results["dynamiq"]
    print("\ndaemon / in-process ceiling:")
    for phase in ("pub", "cons", "e2e"):
        rate = ours.get(f"{phase}_rate") or 0.0
        store, engine = getattr(levels["store"], phase), getattr(levels["engine"], phase)
        print(
            f"  {phase:<5} {rate:>9,.0f} msg/s = {rate / store:.2f} x store, "
            f"{rate / engine:.2f} x engine"
        )


if __name__ == "__main__":
    main()
