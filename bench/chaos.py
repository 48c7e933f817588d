"""Chaos: a local cluster under steady load, through rounds of kill -9, SIGSTOP and restarts.

    python -m bench.chaos --rounds 20            # 3 nodes on one LMDB directory
    python -m bench.chaos --rounds 10 --redis-cluster   # on a 6-node Redis Cluster it starts
    python -m bench.chaos --redis-url redis://127.0.0.1:7000,...   # on a store you run
    python -m bench.chaos --rounds 100 --partitions   # network faults too (root, Linux)
    python -m bench.chaos --rounds 50 --redis-cluster --store-faults   # store primaries too
    python -m bench.chaos --rounds 20 --workers 2   # nodes of 2 workers; kills single ones too
    python -m bench.chaos --rounds 20 --writer thread   # each process commits on a thread
    python -m bench.chaos --rounds 40 --workers 2 --faults "kill -9,SIGTERM"   # only these
    python -m bench.chaos --rolling --rounds 3   # rolling restarts: every node in turn, 3 times
    python -m bench.chaos --rolling --rounds 1 --upgrade-from ../previous   # a rolling upgrade

Each round picks a node and one fault: ``kill -9`` then a restart, ``SIGSTOP``
for a few seconds then ``SIGCONT``, or ``SIGTERM`` then a restart; it waits
for the cluster to settle before the next. With ``--partitions`` each node
runs in a network namespace of its own (``dynamiq.testing.netns``) and the
rounds also cut the network for a few seconds then heal it: one node
isolated (a 2|1 split), one node's outgoing packets dropped (a one-way
partition), or a third of one node's packets lost (a flapping link). With
``--store-faults`` (and ``--redis-cluster``, whose writes then wait for a
replica) the rounds also kill or pause one of the store's primaries
(``bench.store_faults``) and report when its replica was promoted and when
the nodes served again. With ``--workers N`` every node is served by N
worker processes, and the rounds also ``kill -9`` one worker of a node (its
supervisor starts it again). On LMDB the nodes commit through the data
directory's writer process (``storage.writer``, the default), and the rounds
also ``kill -9`` it (the next write starts another); ``--writer thread`` has
each process commit on a thread of its own instead. These loads run
throughout:

- ``chaos``, with ``max_receives: 3`` and a dead-letter queue: 5% of the
  messages are never deleted and 10% are delayed by 1 s;
- ``chaos-ordered``, at half the rate: every message is in one of 50 ordered
  groups and carries a dedup id; a publish that failed is retried with the
  same ids until acknowledged, and every tenth batch is published twice;
- ``chaos-many``, at half the rate: batches of two spread over ``--queues``
  queues (1,000 by default), one after another, as a queue per tenant;
  consumers receive from those that still owe them messages;
- ``chaos-push``, at a quarter of the rate: a topic with a webhook to an
  endpoint in this process (not with ``--partitions``: the nodes' namespaces
  do not share its loopback); every acknowledged message must reach it.

Then the load stops, the queues are drained, and the total-queue check
prints for each what was acknowledged, delivered (a dead-lettered message
counts as delivered), lost (must be 0) and duplicated, how many went to the
dead-letter queue, how many were deleted and dead-lettered both (must be 0),
how many poison messages never got there (must be 0), how many deliveries
went back to an earlier message of their group (must be 0), how many came
while an earlier lease on the message was surely live (double leases, must
be 0) and how many dedup ids were stored under two ids (must be 0), with the
worst time any part of the keyspace went unserved (no running node serving
it, watched every 50 ms) and, per fault, the worst and median time to serve
again: the cluster settling after the recovery (restart, SIGCONT, heal).
Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from statistics import median

from bench.chaos_faults import (
    FAULTS,
    NETWORK_FAULTS,
    WORKER_FAULTS,
    WRITER_FAULTS,
    CoverageWatch,
    apply_fault,
)
from bench.chaos_push import PushLoad
from bench.options import options
from bench.store_faults import STORE_FAULTS, Probe, store_fault
from dynamiq.client import Client
from dynamiq.storage.lmdb.wire import LOG_FILE
from dynamiq.testing.cluster import LocalCluster
from dynamiq.testing.netns import Network, available
from dynamiq.testing.workload import Workload
from tests.servers import RedisCluster, redis_cluster

MAX_RECEIVES = 3
POISON_EVERY = 20  # 5% of the messages are never deleted: each must be dead-lettered
DELAY_EVERY = 10  # 10% are published with a delay of 1 s
DRAIN_SECONDS = 120  # a poison message needs three 5 s leases after the last fault
GROUPS = 50  # ordered groups of the grouped, deduplicated load
MANY_BATCH = 2  # messages per publish of the load spread over many queues
REPEAT_EVERY = 10  # every tenth batch of that load is published twice


def _parser() -> argparse.ArgumentParser:
    parser = options(__doc__, rounds=20, nodes=3)
    parser.add_argument("--rate", type=float, default=1000.0, help="messages per second")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--queues", type=int, default=1000, help="queues the chaos-many load spreads over"
    )
    parser.add_argument(
        "--partitions",
        action="store_true",
        help="each node in a network namespace; rounds cut and heal the network too",
    )
    store = parser.add_mutually_exclusive_group()
    store.add_argument("--redis-url", help="run the nodes on this Redis (Cluster) instead")
    store.add_argument(
        "--redis-cluster",
        action="store_true",
        help="start a 6-node Redis Cluster (Debian's redis-server) and run the nodes on it",
    )
    parser.add_argument(
        "--store-faults",
        action="store_true",
        help="with --redis-cluster: rounds kill or pause a store primary too",
    )
    parser.add_argument(
        "--keep-logs", type=Path, help="copy the nodes' logs into this directory at the end"
    )
    parser.add_argument("--loglevel", default="warn", help="the nodes' log level")
    parser.add_argument(
        "--workers", type=int, default=1, help="worker processes per node (default 1)"
    )
    parser.add_argument(
        "--faults",
        help="only these faults, comma-separated (say 'kill -9,SIGTERM'): "
        "the others are left out of the rounds",
    )
    parser.add_argument(
        "--writer",
        choices=("thread", "process"),
        default="process",
        help="the nodes' storage.writer on LMDB (default process, the nodes' own default); "
        "with process, rounds kill -9 the writer too",
    )
    parser.add_argument(
        "--rolling",
        action="store_true",
        help="each round restarts every node in turn (SIGTERM, start, back in service), "
        "as an upgrade rolls through a cluster",
    )
    parser.add_argument(
        "--upgrade-from",
        type=Path,
        metavar="CHECKOUT",
        help="with --rolling: the nodes start on this checkout of another release, and each "
        "restarts on this one (a rolling upgrade)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.store_faults and not args.redis_cluster:
        parser.error("--store-faults needs --redis-cluster")
    if args.writer == "thread" and _on_redis(args):
        parser.error("--writer is for the nodes' LMDB")
    if args.upgrade_from is not None and not args.rolling:
        parser.error("--upgrade-from needs --rolling")
    if args.partitions and (why := available()) is not None:
        parser.error(f"--partitions: {why}")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    random.seed(seed)
    with (
        tempfile.TemporaryDirectory(prefix="dynamiq-chaos-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        redis = (
            stack.enter_context(redis_cluster(Path(tmp) / "redis")) if args.redis_cluster else None
        )
        network = None
        if args.partitions:
            network = Network([f"n{i + 1}" for i in range(args.nodes)]).up()
            stack.callback(network.down)
        extra = _node_flags(args, redis.url if redis else args.redis_url)
        cluster = LocalCluster(
            Path(tmp),
            args.nodes,
            extra=extra,
            network=network,
            workers=args.workers,
            checkout=args.upgrade_from,
        )
        try:
            return _run(cluster, args, seed, redis if args.store_faults else None)
        finally:
            cluster.stop()
            if args.keep_logs is not None:
                shutil.copytree(Path(tmp) / "logs", args.keep_logs, dirs_exist_ok=True)
                with contextlib.suppress(FileNotFoundError):  # the writer process's
                    shutil.copy(Path(tmp) / "data" / LOG_FILE, args.keep_logs)


def _on_redis(args: argparse.Namespace) -> bool:
    """Whether the nodes run on Redis (a URL given, or a cluster started), not LMDB."""
    return bool(args.redis_cluster or args.redis_url)


def _writer_process(args: argparse.Namespace) -> bool:
    """Whether the nodes commit through a writer process (on LMDB, by default)."""
    return args.writer == "process" and not _on_redis(args)


def _node_flags(args: argparse.Namespace, redis_url: str | None) -> list[str]:
    """The nodes' flags: their log level, and the Redis store they run on, if any."""
    extra = ["--core-loglevelstring", args.loglevel]
    if redis_url:
        extra += ["--storage-backend", "redis", "--storage-url", redis_url]
    elif args.writer == "thread":  # not the default: named (a release before it has no flag)
        extra += ["--storage-writer", "thread"]
    if args.store_faults:
        extra += ["--storage-waitreplicas", "1"]  # an acknowledged write is on two servers
    return extra


def _run(
    cluster: LocalCluster, args: argparse.Namespace, seed: int, redis: RedisCluster | None
) -> int:
    print(
        f"chaos: {args.nodes} nodes of {args.workers} worker(s), "
        f"{'Redis' if _on_redis(args) else f'LMDB, writer {args.writer}'}, "
        f"{args.rounds} rounds, "
        f"{args.rate:g} msg/s, seed {seed}"
    )
    print(f"formed in {cluster.start():.1f} s")
    print(f"monotonic {time.monotonic():.2f} is {datetime.now().time()} (the nodes' log times)")
    urls = [n.url for n in cluster.nodes.values()]
    print("nodes:", ", ".join(f"{name} {n.url}" for name, n in cluster.nodes.items()))
    loads = _loads(urls, args.rate, args.queues)
    # The endpoint listens on this host's loopback, which namespaced nodes do not share.
    push = None if args.partitions else PushLoad(urls, args.rate / 4).start()
    watch = CoverageWatch(cluster).start()
    probe = Probe(urls).start() if redis is not None else None
    started = time.monotonic()
    times = _rounds(cluster, args, watch, redis, probe)
    if probe is not None:
        probe.stop()
    for each in loads.values():
        each.stop()
    if push is not None:
        push.stop()
    print(f"load ran {time.monotonic() - started:.0f} s; draining")
    failed = _drained(loads)
    if push is not None:
        drained = push.drain(DRAIN_SECONDS)
        lines, lost = push.report()
        print("\nchaos-push (a webhook):\n" + "\n".join(lines))
        if not drained:
            print(f"did not drain within {DRAIN_SECONDS} s")
        failed = failed or lost or not drained
    watch.stop()
    print(f"\nworst unserved time          {watch.worst:.2f} s")
    print("\nseconds to serve again after     worst  median  rounds")
    for what, took in sorted(times.items()):
        print(f"  {what:30} {max(took):5.1f}  {median(took):6.1f}  {len(took):6}")
    return 1 if failed else 0


def _loads(urls: list[str], rate: float, queues: int) -> dict[str, Workload]:
    """Make the queues and start their workloads, by name."""
    many = [f"chaos-many-{i:05}" for i in range(queues)]
    with Client(urls) as client:
        for name in many:
            client.create_queue(name, visibility_timeout=5.0)
        client.create_queue("chaos-dead")
        client.create_queue(
            "chaos",
            visibility_timeout=5.0,
            max_receives=MAX_RECEIVES,
            dead_letter_queue="chaos-dead",
        )
        client.create_queue("chaos-ordered", visibility_timeout=5.0)
    time.sleep(1.0)  # every node reloads its catalog within this
    load = Workload(
        urls,
        "chaos",
        rate=rate,
        visibility=5.0,
        poison_every=POISON_EVERY,
        delay_every=DELAY_EVERY,
        dead_letter_queue="chaos-dead",
    ).start()
    ordered = Workload(
        urls,
        "chaos-ordered",
        rate=rate / 2,
        visibility=5.0,
        groups=GROUPS,
        dedup=True,
        repeat_every=REPEAT_EVERY,
    ).start()
    loads = {"chaos": load, "chaos-ordered (grouped, deduplicated)": ordered}
    if many:
        spread = Workload(urls, many, rate=rate / 2, batch=MANY_BATCH, visibility=5.0)
        loads[f"chaos-many ({queues:,} queues)"] = spread.start()
    return loads


def _rounds(
    cluster: LocalCluster,
    args: argparse.Namespace,
    watch: CoverageWatch,
    redis: RedisCluster | None,
    probe: Probe | None,
) -> dict[str, list[float]]:
    """Run the fault rounds; return, per fault, the seconds to serve again: the
    cluster settling after the recovery (restart, SIGCONT, heal); for a store
    primary, its replica's promotion and every probe answering again."""
    faults = [
        *FAULTS,
        *(WORKER_FAULTS if args.workers > 1 else ()),
        *(WRITER_FAULTS if _writer_process(args) else ()),
        *(NETWORK_FAULTS if args.partitions else ()),
        *(STORE_FAULTS if redis else ()),
    ]
    if args.faults:
        wanted = {f.strip() for f in args.faults.split(",")}
        faults = [f for f in faults if f in wanted]
        if not faults:
            raise SystemExit(f"--faults: none of {sorted(wanted)} is a fault of this run")
    times: dict[str, list[float]] = {}
    if args.rolling:
        return _rolls(cluster, args.rounds, watch)
    for number in range(1, args.rounds + 1):
        time.sleep(random.uniform(1.0, 3.0))
        fault = random.choice(faults)
        began = time.monotonic()  # beside the checks' examples, which carry the same clock
        if fault in STORE_FAULTS:
            assert redis is not None and probe is not None
            done = store_fault(redis, probe, fault)
            times.setdefault("store: replica promoted", []).append(done.promoted)
            times.setdefault("store: all served again", []).append(done.serving)
            print(
                f"round {number:2}: {fault} {done.victim} at {began:.2f}: replica promoted after "
                f"{done.promoted:.1f} s, all served again after {done.serving:.1f} s"
            )
            continue
        node = random.choice(list(cluster.nodes.values()))
        apply_fault(cluster, watch, node, fault)
        who = "" if fault in WRITER_FAULTS else f" {node.name}"
        settled = _settled(cluster, f"round {number}: {fault}{who}")
        times.setdefault(f"{fault}: settled", []).append(settled)
        print(
            f"round {number:2}: {fault:8}{who} at {began:.2f}, "
            f"settled {settled:.1f} s after recovery"
        )
    return times


def _settled(cluster: LocalCluster, after: str) -> float:
    """Seconds until every node serves again; what each node saw if not in 60 s."""
    try:  # every node: one that stopped by itself is no fewer to converge
        return cluster.wait_converged(60, expected=list(cluster.nodes))
    except TimeoutError:
        print(f"{after}: the cluster did not settle in 60 s; what each node sees:")
        print(cluster.describe())
        raise


def _rolls(cluster: LocalCluster, rolls: int, watch: CoverageWatch) -> dict[str, list[float]]:
    """Restart every node in turn, each back in service before the next, ``rolls``
    times; return the seconds each took to settle after its restart."""
    took: list[float] = []
    for number in range(1, rolls + 1):
        for node in list(cluster.nodes.values()):
            time.sleep(1.0)
            began = time.monotonic()
            node.cwd = None  # started again on this checkout (an upgrade, with --upgrade-from)
            apply_fault(cluster, watch, node, "SIGTERM")  # stopped, then started again
            settled = _settled(cluster, f"roll {number}: {node.name}")
            took.append(settled)
            print(
                f"roll {number:2}: {node.name} stopped at {began:.2f}, back in service, "
                f"settled {settled:.1f} s after its start"
            )
    return {"rolling restart: settled": took}


def _drained(loads: dict[str, Workload]) -> bool:
    """Drain every workload and print its report; return whether any failed."""
    deadline = time.monotonic() + DRAIN_SECONDS
    failed = False
    for name, each in loads.items():
        drained = each.drain(timeout=max(1.0, deadline - time.monotonic()))
        report = each.ledger.report()
        print(f"\n{name}:")
        print("\n".join(report.lines()))
        if each.ledger.examples:
            print("first failures (monotonic s):\n  " + "\n  ".join(each.ledger.examples))
        if not drained:
            print(f"did not drain within {DRAIN_SECONDS} s")
        failed = failed or report.failed or not drained
    return failed


if __name__ == "__main__":
    sys.exit(main())
