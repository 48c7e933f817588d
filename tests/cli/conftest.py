"""One live node for the command line's tests (a real process, as users run it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dynamiq.testing.cluster import LocalCluster


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cluster = LocalCluster(tmp_path_factory.mktemp("node"), 1)
    cluster.start()
    try:
        yield cluster.nodes["n1"].url
    finally:
        cluster.stop()
