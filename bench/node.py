"""One local node for the benches that measure a single node."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from dynamiq.config import CoreSettings
from dynamiq.testing.cluster import LocalCluster
from tests.servers import redis_cluster

__all__ = ["node_options", "on_a_node", "on_one_node"]

T = TypeVar("T")


def on_one_node(run: Callable[[str], Coroutine[Any, Any, T]]) -> T:
    """Start one node (embedded LMDB in a temporary directory), run ``run(url)`` to
    its end, stop the node; return what ``run`` returned."""
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(Path(tmp), nodes=1)
        try:
            cluster.start()
            return asyncio.run(run(cluster.nodes["n1"].url))
        finally:
            cluster.stop()


def node_options(parser: argparse.ArgumentParser) -> None:
    """``--workers`` and ``--redis-cluster``, for ``on_a_node``."""
    parser.add_argument(
        "--workers",
        type=int,
        default=CoreSettings().worker_count(),
        help="default: what core.workers = auto picks here",
    )
    parser.add_argument(
        "--redis-cluster", action="store_true", help="run the node on a 6-node Redis Cluster"
    )


def on_a_node(args: argparse.Namespace, run: Callable[[str, int], Coroutine[Any, Any, T]]) -> T:
    """Start one node as ``node_options`` said (its workers; on LMDB, or on a 6-node Redis
    Cluster started for it), run ``run(url, pid)`` to its end, stop everything."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        extra: list[str] = []
        if args.redis_cluster:
            redis = stack.enter_context(redis_cluster(Path(tmp) / "redis"))
            extra = ["--storage-backend", "redis", "--storage-url", redis.url]
        cluster = LocalCluster(Path(tmp), nodes=1, workers=args.workers, extra=extra)
        try:
            cluster.start()
            node = cluster.nodes["n1"]
            assert node.proc is not None
            return asyncio.run(run(node.url, node.proc.pid))
        finally:
            cluster.stop()
