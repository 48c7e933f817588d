"""The benches' view of a node's processes: a worker or writer that ended between being
listed and being read counts as nothing, and does not stop the measurement."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.procs import cpu_seconds, memory_mib, state


def test_a_process_that_ended_holds_no_memory_whether_waited_for_or_not() -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while state(ended.pid) != "Z":  # ended, not waited for: no memory fields at all
        assert time.monotonic() < deadline, "the child did not end"
        time.sleep(0.01)
    assert memory_mib(ended.pid, "RssAnon") == 0
    assert cpu_seconds(ended.pid) >= 0
    ended.wait()  # gone from /proc
    assert memory_mib(ended.pid, "VmHWM") == 0
    assert cpu_seconds(ended.pid) == 0


def test_a_live_process_holds_its_memory() -> None:
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as live:
        try:
            deadline = time.monotonic() + 30
            while memory_mib(live.pid, "VmRSS") == 0:
                assert time.monotonic() < deadline, "no memory seen"
                time.sleep(0.01)
            assert memory_mib(live.pid, "RssAnon") > 0
        finally:
            live.kill()
