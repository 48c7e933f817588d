"""The command line's own rates beside W1's, in one run.

    python -m bench.cli [--lines 1000000] [--size 1024] [--w1-n 100000]

1. W1 on a node through the shared driver (``bench.w1``'s way, the daemon
   alone): its publish and consume rates are the yardstick.
2. On a fresh node (embedded LMDB), ``dynamiq publish QUEUE --file F`` of
   ``--lines`` JSON lines of ``--size`` bytes each, then ``dynamiq consume
   QUEUE --max N --output OUT``: wall time of each command, process start and
   the file's line count included, every message fsynced on publish and
   deleted only after its line was written and flushed.
3. The command line's rates as a share of W1's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.w1 import PEERS, run_driver
from dynamiq.testing.cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[1]
DYNAMIQ = ROOT / ".venv" / "bin" / "dynamiq"


def write_lines(path: Path, lines: int, size: int) -> None:
    """``lines`` JSON lines of ``size`` bytes each (newline included), bodies distinct."""
    frame = '{"body": "%010d %s"}\n'
    pad = "x" * (size - len(frame % (0, "")))
    with open(path, "w", encoding="ascii") as out:
        for start in range(0, lines, 10_000):
            out.write("".join(frame % (n, pad) for n in range(start, min(lines, start + 10_000))))


def timed(*argv: str) -> tuple[float, dict[str, object]]:
    """Run ``dynamiq ARGV --json``; its wall time and its JSON result."""
    started = time.perf_counter()
    done = subprocess.run(
        [str(DYNAMIQ), *argv, "--json"], capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"bench.cli: dynamiq {' '.join(argv)} failed: {done.stderr[-2000:]}")
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "{}"
    return elapsed, json.loads(last)


def measure_cli(lines: int, size: int) -> dict[str, float]:
    """Publish then consume ``lines`` messages with the command line; msgs/s of each."""
    with tempfile.TemporaryDirectory() as tmp:
        source, sink = Path(tmp) / "in.jsonl", Path(tmp) / "out.jsonl"
        write_lines(source, lines, size)
        cluster = LocalCluster(Path(tmp) / "node", nodes=1)
        try:
            cluster.start()
            url = cluster.nodes["n1"].url
            timed("queues", "create", "cli", "--url", url)
            pub_s, published = timed("publish", "cli", "--file", str(source), "--url", url)
            if published.get("published") != lines:
                sys.exit(f"bench.cli: published {published}, not {lines}")
            cons_s, _ = timed(
                "consume", "cli", "--max", str(lines), "--output", str(sink), "--url", url
            )
            with open(sink, "rb") as written:
                got = sum(1 for _ in written)
            if got != lines:
                sys.exit(f"bench.cli: consumed {got} lines, not {lines}")
        finally:
            cluster.stop()
    return {"pub": lines / pub_s, "cons": lines / cons_s, "pub_s": pub_s, "cons_s": cons_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=1024, help="bytes per line (default 1024)")
    ap.add_argument("--w1-n", type=int, default=100_000, help="W1 messages (default 100,000)")
    ap.add_argument("--reps", type=int, default=1, help="W1 repetitions (default 1)")
    args = ap.parse_args()
    if not PEERS.exists():
        sys.exit(f"bench.cli: the W1 driver is not at {PEERS} (set DYNAMIQ_PEERS)")
    with tempfile.TemporaryDirectory() as tmp:
        w1_args = argparse.Namespace(n=args.w1_n, reps=args.reps, peers="none", ratio_to=None)
        w1 = run_driver(w1_args, Path(tmp) / "w1.json")["dynamiq"]
    cli = measure_cli(args.lines, args.size)
    rows = [
        (f"W1 through the driver, {args.w1_n:,} messages", w1["pub_rate"], w1["cons_rate"], ",.0f"),
        (f"dynamiq publish/consume, {args.lines:,} lines", cli["pub"], cli["cons"], ",.0f"),
        ("command line / W1", cli["pub"] / w1["pub_rate"], cli["cons"] / w1["cons_rate"], ".2f"),
    ]
    print(f"\n  {'':<44} {'pub msg/s':>10} {'cons msg/s':>11}")
    for label, pub, cons, form in rows:
        print(f"  {label:<44} {pub:>10{form}} {cons:>11{form}}")
    print(f"  (publish took {cli['pub_s']:.1f} s, consume {cli['cons_s']:.1f} s, wall, one each)")


if __name__ == "__main__":
    main()
