"""The latency floor bench: its percentiles, and real commits in a directory it cleans."""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from bench.floor import commits, flushes, main, percentiles


def test_percentiles_are_the_ordered_samples_in_milliseconds() -> None:
    seconds = [i / 1000 for i in range(1000, 0, -1)]  # 1 to 1000 ms, reversed
    assert percentiles(seconds) == {"p50": 501.0, "p90": 901.0, "p99": 991.0, "p99.9": 1000.0}
    assert percentiles([0.002]) == {"p50": 2.0, "p90": 2.0, "p99": 2.0, "p99.9": 2.0}


def test_each_commit_is_stored_and_the_oldest_deleted(tmp_path: Path) -> None:
    timed = commits(tmp_path, 10, metasync=True)
    assert len(timed) == 10 and all(t > 0 for t in timed)
    env = lmdb.open(str(tmp_path), max_dbs=2, readonly=True)
    try:
        with env.begin(db=env.open_db(b"messages", create=False)) as txn:
            keys = [int.from_bytes(k, "big") for k, _ in txn.cursor()]
    finally:
        env.close()
    assert keys == list(range(12, 20))  # 20 put, all but the last 8 deleted
    assert len(flushes(tmp_path, 5)) == 5


def test_the_report_names_each_floor_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["--commits", "20", "--dir", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "20 in a row, ms:"
    assert [line.split("  ")[0] for line in lines[2:]] == [
        "fdatasync of a 4 KB page",
        "LMDB, as the node commits (2 flushes)",
        "LMDB, meta page not synced (1 flush)",
    ]
    assert list(tmp_path.iterdir()) == []
