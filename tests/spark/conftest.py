"""One local Spark session for the module's tests, and a real node for it to read."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NodeProcess
from tests.servers import require


def _pyspark() -> Any:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("pyspark is required in CI (setup.sh installs the spark extra)")
        pytest.skip("pyspark is not installed (pip install -e '.[spark]')")
    from pyspark.sql import SparkSession

    return SparkSession


SPARK_ENV = {
    "SPARK_LOCAL_IP": "127.0.0.1",
    "PYSPARK_PYTHON": sys.executable,
    "PYSPARK_DRIVER_PYTHON": sys.executable,
}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    require("java")
    session_cls = _pyspark()
    os.environ.update(SPARK_ENV)
    import dynamiq.spark

    # local[2,4]: two cores, and a failed task is tried up to four times.
    session = (
        session_cls.builder.master("local[2,4]")
        .appName("dynamiq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    dynamiq.spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    started = NodeProcess(Path(tmp_path_factory.mktemp("spark-node"))).start()
    try:
        yield started
    finally:
        started.stop()
