"""One local Spark session for the module's tests, and real nodes for it to read (one over
HTTPS, with a certificate authority made for the module)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NodeProcess
from tests.pki import Pki
from tests.servers import require, require_module


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    require("java")
    require_module("pyspark", "spark")
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


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(Path(tmp_path_factory.mktemp("spark-pki")))


@pytest.fixture(scope="module")
def https_node(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[NodeProcess]:
    data = Path(tmp_path_factory.mktemp("spark-https-node"))
    started = NodeProcess(data, *pki.flags()).start()
    try:
        yield started
    finally:
        started.stop()
