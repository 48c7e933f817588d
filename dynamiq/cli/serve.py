"""``dynamiq serve`` and ``dynamiq cluster``: run a node, or a local cluster."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from dynamiq.config.sources import flag, keys, load_settings
from dynamiq.errors import ConfigError, DynamiqError

__all__ = ["register", "serve_node"]


def register(sub: Any) -> None:
    """Add ``serve`` and ``cluster`` to the ``dynamiq`` parser's subcommands."""
    serve = sub.add_parser(
        "serve",
        help="run a node",
        description="Run a node. Every setting can also be given as "
        "DYNAMIQ_<SECTION>_<KEY> in the environment.",
    )
    serve.add_argument("-c", "--config", help="gcfg/INI configuration file")
    for key in keys():
        serve.add_argument(flag(key), dest=key, metavar="VALUE", help=f"override {key}")
    serve.set_defaults(main=serve_node)
    local = sub.add_parser(
        "cluster",
        help="run a local cluster on loopback, for trying it out",
        description="Start N nodes on 127.0.0.1 sharing one LMDB directory, gossiping "
        "with a fresh secret; Ctrl-C stops them all.",
    )
    local.add_argument("--nodes", type=int, default=3, help="how many nodes (default 3)")
    local.add_argument("--data", default="./data-cluster", help="data and logs directory")
    local.add_argument(
        "--http-port", type=int, default=8081, help="first node's HTTP port; the next follow"
    )
    local.set_defaults(
        main=lambda args: _local_cluster(args.nodes, Path(args.data), args.http_port)
    )


def serve_node(args: argparse.Namespace) -> int:
    """Run a node until it is stopped; return the exit status."""
    flags = {k: v for k, v in vars(args).items() if k in keys() and v is not None}
    try:
        settings = load_settings(args.config, flags=flags)
    except ConfigError as exc:
        print(f"dynamiq: configuration error: {exc}", file=sys.stderr)
        return 2
    from dynamiq.logs import configure
    from dynamiq.process.daemon import run, serve

    configure(settings.core.loglevelstring)
    workers = settings.core.worker_count()
    try:
        if workers > 1:
            from dynamiq.process.supervisor import supervise

            return supervise(settings, workers)
        run(serve(settings))
    except ConfigError as exc:
        print(f"dynamiq: configuration error: {exc}", file=sys.stderr)
        return 2
    except DynamiqError as exc:  # the store is unreachable, or the node cannot go on
        print(f"dynamiq: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"dynamiq: cannot listen on {settings.core.httpaddress}:"
            f"{settings.core.httpport}: {exc.strerror}",
            file=sys.stderr,
        )
        return 1
    return 0


def _local_cluster(count: int, data: Path, http_port: int) -> int:
    from dynamiq.testing.cluster import LocalCluster

    if not 1 <= count <= 16:
        print("dynamiq: --nodes must be from 1 to 16", file=sys.stderr)
        return 2
    cluster = LocalCluster(data, count, http_ports=[http_port + i for i in range(count)])
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        seconds = cluster.start()
        print(f"dynamiq: {count} nodes formed a cluster in {seconds:.1f} s:")
        for node in cluster.nodes.values():
            print(f"  {node.name}  {node.url}  gossip {node.gossip}  log {node.log_path}")
        print("Ctrl-C stops them all.", flush=True)
        stop.wait()
    except (TimeoutError, RuntimeError) as exc:
        print(f"dynamiq: {exc}", file=sys.stderr)
        return 1
    finally:
        cluster.stop()
    return 0
