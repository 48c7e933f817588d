"""One local Spark session for the module's tests, and a real node for it to read."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NodeProcess
from tests.servers import require


def require_pyspark() -> None:
    """Skip the calling test module without pyspark (fail in CI); call it before importing it."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("pyspark is required in CI (setup.sh installs the spark extra)")
        pytest.skip("pyspark is not installed (pip install -e '.[spark]')", allow_module_level=True)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    require("java")
    require_pyspark()
    import dynamiq.spark

    # local[2,4]: two cores, and a failed task is tried up to four times.
    session = dynamiq.spark.local_session("dynamiq-tests", "local[2,4]")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    started = NodeProcess(Path(tmp_path_factory.mktemp("spark-node"))).start()
    try:
        yield started
    finally:
        started.stop()
