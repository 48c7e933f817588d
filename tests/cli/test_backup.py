"""``dynamiq backup`` while a node serves under load, and a node started on the copy."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

from dynamiq.client import Client
from tests.conftest import NodeFactory
from tests.waiting import until


def _backup(dest: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``dynamiq backup DEST ARGS`` as an operator would."""
    command = [sys.executable, "-m", "dynamiq", "backup", str(dest), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_a_backup_under_load_restores_every_message_acknowledged_before_it(
    node_factory: NodeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    node = node_factory(data=data).start()
    acknowledged: list[bytes] = []
    stop = threading.Event()

    def publish() -> None:
        with Client(node.url) as client:
            n = 0
            while not stop.is_set():
                batch = [b"m%06d" % (n + i) for i in range(20)]
                client.publish("orders", batch)
                acknowledged.extend(batch)
                n += len(batch)

    with Client(node.url) as client:
        client.create_queue("orders", visibility_timeout=300)
        client.create_queue("empty")
        client.publish("orders", [b"leased"])
        (leased,) = client.receive("orders", 1)  # in flight when the backup is taken
        assert leased.body == b"leased"
    producer = threading.Thread(target=publish)
    producer.start()
    try:
        until(lambda: len(acknowledged) >= 2000, 30.0)
        before = [b"leased", *acknowledged]  # acknowledged before the backup began
        done = _backup(tmp_path / "copy", "--path", str(data), "--json")
        until(lambda: len(acknowledged) >= len(before) + 500, 30.0)  # it served meanwhile
    finally:
        stop.set()
        producer.join()
    assert done.returncode == 0, done.stderr
    held = json.loads(done.stdout)
    assert held["queues"] == 2 and held["messages"] >= len(before)
    node.stop()
    # A node started on the copy serves each of them once, the leased one too
    restored = node_factory(data=tmp_path / "copy").start()
    seen: Counter[bytes] = Counter()
    with Client(restored.url) as client:
        while batch := client.receive("orders", 100, wait_seconds=0.5):
            seen.update(m.body for m in batch)
            client.delete("orders", [m.id for m in batch])
    assert all(seen[b if isinstance(b, bytes) else b.encode()] == 1 for b in before)
    assert set(seen) <= {b"leased", *acknowledged} | {
        b"m%06d" % i for i in range(len(acknowledged) + 20)
    }
    assert sum(seen.values()) == held["messages"]


def test_a_backup_refuses_a_directory_that_holds_a_store(tmp_path: Path) -> None:
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "data.mdb").write_bytes(b"")
    done = _backup(tmp_path / "copy", "--path", str(tmp_path))
    assert done.returncode == 2 and "exists already" in done.stderr
