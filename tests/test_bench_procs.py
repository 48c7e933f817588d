"""The benches' view of a node's processes: a worker or writer that ended between being
listed and being read counts as nothing, and does not stop the measurement."""

from __future__ import annotations

import subprocess
import sys

from bench.procs import cpu_seconds, memory_mib, state
from tests.waiting import until


def test_a_process_that_ended_holds_no_memory_whether_waited_for_or_not() -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    # Ended, not waited for: no memory fields at all.
    until(lambda: state(ended.pid) == "Z", 30.0, 0.01, what="the child ends")
    assert memory_mib(ended.pid, "RssAnon") == 0
    assert cpu_seconds(ended.pid) >= 0
    ended.wait()  # gone from /proc
    assert memory_mib(ended.pid, "VmHWM") == 0
    assert cpu_seconds(ended.pid) == 0


def test_a_live_process_holds_its_memory() -> None:
    with subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"]) as live:
        try:
            until(lambda: memory_mib(live.pid, "VmRSS") > 0, 30.0, 0.01, what="its memory seen")
            assert memory_mib(live.pid, "RssAnon") > 0
        finally:
            live.kill()
