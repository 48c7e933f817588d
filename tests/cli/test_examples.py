"""The examples run as their docstrings say, against a live node."""

from __future__ import annotations

import importlib.util
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from dynamiq.client import Client

EXAMPLES = Path(__file__).parents[2] / "examples"


def run(example: str, *args: str, url: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / example), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "DYNAMIQ_HOSTS": url},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def load(example: str) -> ModuleType:
    """Import an example as a module, to reckon what it should print."""
    spec = importlib.util.spec_from_file_location(example.removesuffix(".py"), EXAMPLES / example)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fan_out_gives_each_queue_the_orders_its_subscription_takes(node: str) -> None:
    fanout = load("fanout.py")
    rng = random.Random(11)
    orders = [fanout.order(n, rng) for n in range(150)]
    eu = sum(1 for o in orders if o.routing_key.startswith("orders.eu."))
    big = sum(1 for o in orders if o.attributes["amount"] >= 100)
    assert 0 < eu < 150 and 0 < big < 150  # each subscription leaves some out
    out = run("fanout.py", "--orders", "150", url=node)
    assert out.strip() == f"audit 150, eu-shipping {eu}, big-orders {big}"


def test_the_worker_handles_the_good_and_dead_letters_the_poison(node: str) -> None:
    out = run("worker.py", "--seed", "100", url=node)
    # 90 handled once; 10 poison messages fail on each of their 3 receives
    assert out.strip() == "handled 90, failed 30 times; 10 dead-lettered"


def test_the_producer_spools_through_an_outage_and_stores_each_event_once(
    node: str, tmp_path: Path, down_url: str
) -> None:
    spool = str(tmp_path / "spool")
    out = run(
        "producer.py",
        "--queue",
        "events",
        "--count",
        "300",
        "--spool",
        spool,
        "--drain",
        "0",
        url=down_url,
    )
    assert out.strip() == "published 0, spooled 300; some still wait in the spool"
    # A second run while they wait: all are sent. Its own events go behind them
    # while any wait, or straight to the node once the background sender has
    # emptied the spool (it may win that race: a few ms on loopback).
    out = run("producer.py", "--queue", "events", "--count", "300", "--spool", spool, url=node)
    counted = re.fullmatch(r"published (\d+), spooled (\d+); the spool is empty", out.strip())
    assert counted is not None, out
    assert int(counted[1]) + int(counted[2]) == 300
    with Client(node) as client:  # both runs' copies of each event: stored once
        assert client.queue("events")["stats"]["depth"] == 300
