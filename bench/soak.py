"""Soak: a node (or a cluster) under a steady mixed load for an hour, watched for growth.

    python -m bench.soak --minutes 60                 # one node
    python -m bench.soak --minutes 60 --nodes 3       # three, one restarted every 10 minutes

The load, from this process's threads through the Python client: ``--rate``
messages a second stored, in batches of 20 over ``--queues`` queues (a tenth
of them as batches of 2 through a topic that fans out to ten queues), consumers
receiving 50 at a time with short long polls and deleting what they got; a
probe that publishes one message and receives it ten times a second (its
round trip is the latency measured); and every 10 s a queue created, used
and deleted, and an application key made and revoked. With several nodes,
one node is stopped and started again every ``--restart-every`` minutes.

Every ``--sample`` seconds it records, summed over the nodes' processes: the
anonymous resident memory, the open file descriptors and the CPU used; the
store's file size and its free pages; and the probe's p50 and p99 over the
interval. At the end the load stops, the queues are drained, and it prints
the verdict against the run's first ``--settle`` minutes (anonymous memory and
descriptors within 10% of what they were in its last minute, the store's
file no larger than twice it, the p99 of each later 10-minute window within
20% of the first's, nothing lost), and writes the series as CSV and as a PNG
plot. In a cluster run the memory and descriptors of the ``RECOVER_MINUTES``
after each restart are set aside (the restarted node fills its caches again)
and said so; the p99 windows keep them.

    python -m bench.soak --nodes 3 --from-csv bench/results/soak-3node.csv   # verdict again
"""

from __future__ import annotations

import argparse
import csv
import itertools
import os
import secrets
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.options import options
from bench.procs import cpu_seconds, memory_mib, processes
from dynamiq.client import Client
from dynamiq.errors import DynamiqError
from dynamiq.storage.lmdb.backup import held_in
from dynamiq.testing.cluster import LocalCluster
from dynamiq.testing.crew import Crew

BATCH = 20
BODY = 512  # bytes a message
FANNED = 10  # queues the topic fans out to
WINDOW_MINUTES = 10
RECOVER_MINUTES = 2.0  # after a restart: the restarted node fills its caches again
PROBE_SECONDS = 0.1
CONSUME_ROUND_SECONDS = 0.5


@dataclass
class Ledger:
    """What the load published and what it deleted, per queue (under ``lock``)."""

    acked: dict[str, set[int]] = field(default_factory=dict)
    deleted: dict[str, set[int]] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)  # probe round trips since the last sample
    errors: int = 0
    examples: list[str] = field(default_factory=list)  # the first few errors, as said
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, book: dict[str, set[int]], queue: str, ids: list[int]) -> None:
        with self.lock:
            book.setdefault(queue, set()).update(ids)

    def totals(self) -> tuple[int, int]:
        """Messages acknowledged, and deleted, so far."""
        with self.lock:
            acked = sum(len(ids) for ids in self.acked.values())
            return acked, sum(len(ids) for ids in self.deleted.values())

    def lost(self) -> int:
        with self.lock:
            return sum(len(ids - self.deleted.get(q, set())) for q, ids in self.acked.items())


class Load:
    """The mixed load's threads, until ``stop``."""

    def __init__(self, urls: list[str], key: str, rate: float, queues: int, ledger: Ledger) -> None:
        self.urls, self.key, self.rate, self.ledger = urls, key, rate, ledger
        self.queues = [f"soak-{i:03d}" for i in range(queues)]
        self._crew = Crew()
        self._stop = self._crew.stopping

    def start(self) -> Load:
        with Client(self.urls, key=self.key) as client:
            for q in [*self.queues, "soak-probe"]:
                client.create_queue(q)
            client.create_topic("soak-fan")
            for q in self.queues[:FANNED]:
                client.subscribe("soak-fan", q)
        for job in (self._publish, self._publish, self._probe, self._churn):
            self._crew.add(job)
        for i in range(4):
            self._crew.add(self._consume, self.queues[i::4])
        self._crew.start()
        return self

    def stop(self) -> None:
        self._crew.stop()

    def _failed(self, exc: DynamiqError) -> None:
        with self.ledger.lock:
            self.ledger.errors += 1
            if len(self.ledger.examples) < 5:
                self.ledger.examples.append(f"{exc.code}: {exc}")

    def _publish(self) -> None:
        interval = 2 * BATCH / self.rate  # two producers
        n = itertools.count()
        with Client(self.urls, key=self.key) as client:
            due = time.monotonic()
            while not self._stop.is_set():
                i = next(n)
                try:
                    if i % 10 == 0:  # a tenth through the topic: as many copies stored
                        bodies = [_body(i, k) for k in range(BATCH // FANNED)]
                        placed = client.publish_topic("soak-fan", bodies)
                        for q, ids in placed.items():
                            self.ledger.add(self.ledger.acked, q, [x for x in ids if x is not None])
                    else:
                        bodies = [_body(i, k) for k in range(BATCH)]
                        q = self.queues[i % len(self.queues)]
                        self.ledger.add(self.ledger.acked, q, list(client.publish(q, bodies)))
                except DynamiqError as exc:
                    self._failed(exc)
                due += interval
                time.sleep(max(0.0, due - time.monotonic()))

    def _consume(self, queues: list[str]) -> None:
        """Visit each queue twice a second: a receive then takes what came meanwhile
        (about ten messages) in one call."""
        with Client(self.urls, key=self.key) as client:
            while not self._stop.is_set():
                began = time.monotonic()
                for q in queues:
                    self._drain_once(client, q, 0)
                self._stop.wait(max(0.0, CONSUME_ROUND_SECONDS - (time.monotonic() - began)))

    def _drain_once(self, client: Client, queue: str, wait: float) -> int:
        try:
            got = client.receive(queue, 50, wait_seconds=wait)
            if got:
                gone = client.delete(queue, [m.id for m in got])
                self.ledger.add(self.ledger.deleted, queue, list(gone))
            return len(got)
        except DynamiqError as exc:
            self._failed(exc)
            return 0

    def _probe(self) -> None:
        with Client(self.urls, key=self.key) as client:
            while not self._stop.wait(PROBE_SECONDS):
                began = time.monotonic()
                try:
                    (mid,) = client.publish("soak-probe", [b"probe"])
                    got = client.receive("soak-probe", 10, wait_seconds=2)
                    if got:
                        client.delete("soak-probe", [m.id for m in got])
                    if any(m.id == mid for m in got):
                        with self.ledger.lock:
                            self.ledger.latencies.append(time.monotonic() - began)
                except DynamiqError as exc:
                    self._failed(exc)

    def _churn(self) -> None:
        with Client(self.urls, key=self.key) as client:
            for n in itertools.count():
                if self._stop.wait(10.0):
                    return
                name = f"soak-churn-{n}"
                try:
                    client.create_queue(name)
                    client.publish(name, [b"short-lived"] * 10)
                    client.delete_queue(name)
                    key = client.create_key(f"soak{n}", "produce")
                    client.revoke_key(key["key_id"])
                except DynamiqError as exc:
                    self._failed(exc)

    def drain(self, timeout: float = 120.0) -> None:
        """Receive and delete until every queue is empty (or ``timeout`` passed)."""
        deadline = time.monotonic() + timeout
        with Client(self.urls, key=self.key) as client:
            while time.monotonic() < deadline:
                if sum(self._drain_once(client, q, 0) for q in self.queues) == 0:
                    return


def _body(batch: int, k: int) -> bytes:
    return (b"soak %d %d " % (batch, k)).ljust(BODY, b".")


def _fds(pid: int) -> int:
    return sum(len(os.listdir(f"/proc/{p}/fd")) for p in processes(pid))


def _sample(
    cluster: LocalCluster, data: Path, ledger: Ledger, cpu_before: float
) -> dict[str, float]:
    pids = [n.proc.pid for n in cluster.running() if n.proc is not None]
    with ledger.lock:
        latencies, ledger.latencies = ledger.latencies, []
    held = held_in(data)
    ordered = sorted(latencies) or [0.0]
    return {
        "anon_mib": sum(memory_mib(p, "RssAnon") for p in pids),
        "fds": sum(_fds(p) for p in pids),
        "cpu_s": sum(cpu_seconds(p) for p in pids) - cpu_before,
        "file_mib": held.bytes / (1 << 20),
        "free_mib": held.free / (1 << 20),
        "p50_ms": 1000 * ordered[len(ordered) // 2],
        "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "probes": len(latencies),
    }


def _line(row: dict[str, float]) -> str:
    return (
        f"{row['minute']:6.1f} min  anon {row['anon_mib']:7.1f} MiB  fds {row['fds']:5.0f}  "
        f"file {row['file_mib']:7.1f} MiB (free {row['free_mib']:6.1f})  "
        f"p50/p99 {row['p50_ms']:5.2f}/{row['p99_ms']:6.2f} ms  "
        f"{row['stored_per_s']:5.0f} msg/s  backlog {row['backlog']:6.0f}"
    )


def _verdict(
    rows: list[dict[str, float]], settle: float, lost: int, restarts: Sequence[float] = ()
) -> list[str]:
    """Compare what came after the first ``settle`` minutes with its last minute (the
    memory and descriptors of the minutes after a restart at ``restarts`` set aside)."""

    def steady(row: dict[str, float]) -> bool:
        return not any(r <= row["minute"] < r + RECOVER_MINUTES for r in restarts)

    early = [r for r in rows if settle - 1 < r["minute"] <= settle and steady(r)]
    late = [r for r in rows if r["minute"] > settle and steady(r)]
    if not early or not late:
        return ["too short a run for a verdict"]
    lines = []
    if restarts:
        aside = sum(1 for r in rows if not steady(r))
        lines.append(f"{aside} samples within {RECOVER_MINUTES:g} min of a restart set aside")
    for key, spread in (("anon_mib", 0.10), ("fds", 0.10)):
        base = statistics.median(r[key] for r in early)
        worst = max(abs(r[key] - base) / base for r in late) if base else 0.0
        ok = "ok" if worst <= spread else "fell" if max(r[key] for r in late) <= base else "GREW"
        lines.append(
            f"{key:9} at {settle:g} min {base:8.1f}; later off by at most {worst:6.1%} ({ok})"
        )
    file_base = early[-1]["file_mib"]
    file_most = max(r["file_mib"] for r in late)
    ok = "ok" if file_most <= 2 * file_base else "GREW"
    lines.append(f"store file {file_base:.1f} MiB, at most {file_most:.1f} MiB later ({ok})")
    windows: dict[int, list[float]] = {}
    for r in rows:
        windows.setdefault(int(r["minute"] // WINDOW_MINUTES), []).append(r["p99_ms"])
    p99 = {w: statistics.median(v) for w, v in sorted(windows.items())}
    first = p99[min(p99)]
    for w, value in p99.items():
        off = (value - first) / first if first else 0.0
        ok = "ok" if abs(off) <= 0.20 else "off"
        span = f"{w * WINDOW_MINUTES:3}-{(w + 1) * WINDOW_MINUTES:<3}"
        lines.append(f"p99 minutes {span} {value:6.2f} ms ({off:+.0%}, {ok})")
    lines.append(f"lost {lost}")
    return lines


def _restarts(args: argparse.Namespace) -> list[float]:
    """The minutes a cluster run restarts a node at."""
    every = args.restart_every
    return [every * k for k in range(1, int(args.minutes / every) + 1) if every * k < args.minutes]


def _title(args: argparse.Namespace) -> str:
    return f"soak: {args.nodes} node(s), {args.rate:g} msg/s over {args.queues} queues"


def _plot(
    rows: list[dict[str, float]], path: Path, title: str, restarts: Sequence[float] = ()
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [r["minute"] for r in rows]
    fig, axes = plt.subplots(4, 1, figsize=(9, 10), sharex=True)
    for ax, keys, label in (
        (axes[0], ["anon_mib"], "anonymous RSS (MiB)"),
        (axes[1], ["fds"], "open descriptors"),
        (axes[2], ["file_mib", "free_mib"], "store file, free pages (MiB)"),
        (axes[3], ["p50_ms", "p99_ms"], "probe round trip (ms)"),
    ):
        for key in keys:
            ax.plot(minutes, [r[key] for r in rows], label=key)
        for minute in restarts:
            ax.axvline(minute, color="grey", linestyle=":", linewidth=1)
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if len(keys) > 1:
            ax.legend(loc="upper left")
    axes[-1].set_xlabel("minutes")
    fig.suptitle(f"{title} (dotted: a node restarted)" if restarts else title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def _parser() -> argparse.ArgumentParser:
    parser = options(__doc__, minutes=60.0, nodes=1)
    parser.add_argument("--rate", type=float, default=2000.0, help="messages per second")
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--settle", type=float, default=10.0, help="minutes before the baseline")
    parser.add_argument("--restart-every", type=float, default=10.0, help="minutes (cluster)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="CSV and PNG here")
    parser.add_argument(
        "--from-csv", type=Path, help="the verdict and plot of a run's CSV again (no run)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    restart_minutes = _restarts(args) if args.nodes > 1 else []
    if args.from_csv is not None:
        with args.from_csv.open() as given:
            kept = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(given)]
        _plot(kept, args.from_csv.with_suffix(".png"), _title(args), restart_minutes)
        print("\n".join(_verdict(kept, args.settle, 0, restart_minutes)))
        print("(lost: as the run printed it)")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"soak-{args.nodes}node"
    ledger = Ledger()
    with tempfile.TemporaryDirectory(prefix="dynamiq-soak-") as tmp:
        admin = secrets.token_hex(16)  # keys on: the load makes and revokes some
        env = {"DYNAMIQ_AUTH_ENABLED": "true", "DYNAMIQ_AUTH_ADMINKEY": admin}
        cluster = LocalCluster(Path(tmp), args.nodes, env=env)
        try:
            cluster.start()
            urls = [n.url for n in cluster.nodes.values()]
            load = Load(urls, admin, args.rate, args.queues, ledger).start()
            rows = _sampled(args, cluster, Path(tmp) / "data", ledger)
            load.stop()
            load.drain()
        finally:
            cluster.stop()
    with (stem.with_suffix(".csv")).open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    _plot(rows, stem.with_suffix(".png"), _title(args), restart_minutes)
    lost = ledger.lost()
    verdict = _verdict(rows, args.settle, lost, restart_minutes)
    print("\n".join(["", *verdict, f"errors answered {ledger.errors}"]))
    print("\n".join(f"  {e}" for e in ledger.examples))
    print(f"series in {stem}.csv and {stem}.png")
    return 1 if lost else 0


def _sampled(
    args: argparse.Namespace, cluster: LocalCluster, data: Path, ledger: Ledger
) -> list[dict[str, float]]:
    """Sample the run every ``--sample`` seconds for ``--minutes``, restarting a node of
    a cluster every ``--restart-every`` minutes; return the rows."""
    cpu_before = sum(cpu_seconds(n.proc.pid) for n in cluster.running() if n.proc)
    rows: list[dict[str, float]] = []
    started = time.monotonic()
    restarts = itertools.cycle(list(cluster.nodes))
    stored, sampled = 0, 0.0
    next_restart = args.restart_every * 60
    while (elapsed := time.monotonic() - started) < args.minutes * 60:
        time.sleep(args.sample)
        elapsed = time.monotonic() - started
        if args.nodes > 1 and next_restart <= elapsed < args.minutes * 60:
            name = next(restarts)
            cluster.nodes[name].stop()
            cluster.start_node(name)
            next_restart += args.restart_every * 60
            print(f"{elapsed / 60:6.1f} min: restarted {name}", flush=True)
        acked, deleted = ledger.totals()
        row = {
            "minute": elapsed / 60,
            **_sample(cluster, data, ledger, cpu_before),
            "stored_per_s": (acked - stored) / (elapsed - sampled),
            "backlog": acked - deleted,
        }
        stored, sampled = acked, elapsed
        rows.append(row)
        print(_line(row), flush=True)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
