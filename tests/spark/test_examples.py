"""The Spark example runs as its docstring says, against a live node."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from dynamiq.client import Client
from tests.conftest import NodeProcess
from tests.servers import require, require_module

EXAMPLE = Path(__file__).parents[2] / "examples" / "spark_pipeline.py"


@pytest.fixture(autouse=True)
def _spark_available() -> None:
    require("java")
    require_module("pyspark", "spark")


def test_the_spark_pipeline_totals_every_event_once_and_lets_them_go(node: NodeProcess) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--seed", "3000"],
        capture_output=True,
        text=True,
        env={**os.environ, "DYNAMIQ_HOSTS": node.url},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip().startswith("counted 3000 events")
    with Client(node.url) as client:
        assert client.queue("events")["stats"]["depth"] == 0  # deleted after the totals
        totals = client.receive("results-log", 100, visibility_timeout=60)
    rng, expected = random.Random(7), Counter[str]()
    for _ in range(3000):  # the events the example seeds, in its order
        user = f"u{rng.randrange(20)}"
        expected[user] += rng.randrange(1, 100)
    rows = [json.loads(m.body) for m in totals]
    assert {row["user"]: row["total"] for row in rows} == expected  # one total per user
    assert sum(row["events"] for row in rows) == 3000
