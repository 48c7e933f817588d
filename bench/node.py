"""One local node for the benches that measure a single node."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from dynamiq.testing.cluster import LocalCluster

__all__ = ["on_one_node"]

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
