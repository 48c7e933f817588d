"""W1 of this checkout against another one, in interleaved rounds.

A change is within a few percent of the commit before it only if the
machine's own drift is taken out: this runs the shared W1 driver for
``--rounds`` rounds of one repetition each, the two nodes back to back in
every round and in alternating order (A B, B A, A B, ...), and reports for
each phase the median over rounds of this checkout's rate divided by the
other's in the same round, with the spread of those ratios.

    DYNAMIQ_BASELINE=<checkout of the commit before> \\
        .venv/bin/python -m bench.ab --rounds 8 --n 50000
    DYNAMIQ_BASELINE=... .venv/bin/python -m bench.ab --cluster3   # 3 nodes each

A round whose repetition the driver discarded as noisy (other processes used
the CPU) is run again by the driver; the round's two halves are always
adjacent in time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.options import options

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT.parent / "shared" / "peers" / "peers.py"
SYSTEMS = {
    False: ("dynamiq", "dynamiq-baseline"),
    True: ("dynamiq-cluster3", "dynamiq-cluster3-baseline"),
}
PHASES = ("pub", "cons", "e2e", "lat")


def _round(order: tuple[str, str], args: argparse.Namespace) -> dict[str, Any]:
    """Run the driver once over both nodes in ``order``; return its raw results."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "round.json"
        cmd = [
            sys.executable,
            str(args.driver),
            *order,
            "--manage",
            "--plugin",
            str(ROOT / "bench" / "peers_plugin.py"),
            "--reps",
            "1",
            "--n",
            str(args.n),
            "--phases",
            args.phases,
            "--json",
            str(out),
        ]
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=sys.stderr)
        raw: dict[str, Any] = json.loads(out.read_text())["raw"]
        return raw


def _figures(rep: dict[str, Any]) -> dict[str, float]:
    """One repetition's rates, p99 latency and server CPU per message."""
    out: dict[str, float] = {}
    for phase, r in rep.items():
        out[f"{phase} msg/s"] = r["rate"]
        out[f"{phase} srv us/msg"] = r["server_cpu_s"] / (r["rate"] * r["wall"]) * 1e6
        if phase == "lat" and "p99" in r:
            out["lat p99 ms"] = r["p99"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = options(__doc__, rounds=8, n=50_000)
    ap.add_argument("--phases", default="pub,cons,e2e")
    ap.add_argument("--driver", type=Path, default=DRIVER, help="the shared W1 driver")
    ap.add_argument(
        "--cluster3", action="store_true", help="3-node clusters on one LMDB directory each"
    )
    args = ap.parse_args(argv)
    if not os.environ.get("DYNAMIQ_BASELINE"):
        ap.error("set DYNAMIQ_BASELINE to the other checkout")
    ours_name, theirs_name = SYSTEMS[args.cluster3]
    ratios: dict[str, list[float]] = {}
    for i in range(args.rounds):
        order = (ours_name, theirs_name) if i % 2 == 0 else (theirs_name, ours_name)
        raw = _round(order, args)
        ours, theirs = _figures(raw[ours_name][0]), _figures(raw[theirs_name][0])
        line = []
        for key, value in ours.items():
            ratio = value / theirs[key]
            ratios.setdefault(key, []).append(ratio)
            line.append(f"{key} {ratio:.3f}x")
        print(f"round {i + 1} ({order[0]} first): " + "  ".join(line), flush=True)
    print(
        f"\n{ours_name} / {theirs_name} ({os.environ['DYNAMIQ_BASELINE']}), {args.rounds} rounds:"
    )
    for key, values in ratios.items():
        print(
            f"  {key:18} median {statistics.median(values):.3f}x"
            f"  min {min(values):.3f}x  max {max(values):.3f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
