"""A node's processes as ``/proc`` shows them: the node and its workers, summed."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

__all__ = ["MemoryWatch", "cpu_seconds", "memory_mib", "processes", "state"]


def processes(pid: int) -> list[int]:
    """``pid`` and every process under it (a node's workers and the store's writer
    process), parents first."""
    found, i = [pid], 0
    while i < len(found):
        for task in Path(f"/proc/{found[i]}/task").glob("*/children"):
            found += [int(child) for child in task.read_text().split()]
        i += 1
    return found


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system) ``pid`` and its workers have used so far, summed,
    those that ended included (a worker killed and started again)."""
    ticks = 0
    for p in processes(pid):
        # The fields after the command's closing parenthesis: utime, stime, cutime and
        # cstime (its children that ended and were waited for) are the 12th to 15th.
        # One that ended since it was listed counts in its parent's once waited for.
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            ticks += sum(int(f) for f in _stat(p)[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def state(pid: int) -> str:
    """A process's state as ``/proc`` shows it (``Z``: ended, not waited for yet), or
    ``gone`` once it has no entry there (waited for)."""
    try:
        return _stat(pid)[0]
    except (FileNotFoundError, ProcessLookupError):
        return "gone"


def _stat(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command's closing parenthesis."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def _status_kib(pid: int, field: str) -> int:
    """A memory field of one process, in KiB: 0 for one that ended (a zombie not waited
    for yet has no memory fields, and one waited for has no ``/proc`` entry)."""
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def memory_mib(pid: int, field: str = "VmHWM") -> float:
    """Memory of ``pid`` and its workers, summed, in MiB: the peak (``VmHWM``), the
    resident (``VmRSS``), or its anonymous (``RssAnon``) or file-backed (``RssFile``)
    part. Each process's own peak is summed: an upper bound of the node's peak;
    file-backed pages the workers share (the LMDB map) are counted once per worker.
    """
    return sum(_status_kib(p, field) for p in processes(pid)) / 1024


class MemoryWatch:
    """The most anonymous and file-backed memory ``pid`` and its workers held, sampled
    every 100 ms from a thread until ``stop``.

    A node's peak RSS is mostly LMDB's mapped pages (file-backed, dropped by the
    kernel at will, counted again by each worker); the anonymous part is what
    the node itself holds.
    """

    def __init__(self, pid: int) -> None:
        self._most = {"RssAnon": 0.0, "RssFile": 0.0}
        self._processes = 1
        self._done = threading.Event()

        def watch() -> None:
            while not self._done.wait(0.1):
                with contextlib.suppress(OSError, ValueError):  # a worker ending
                    self._processes = max(self._processes, len(processes(pid)))
                    for part, most in self._most.items():
                        self._most[part] = max(most, memory_mib(pid, part))

        self._thread = threading.Thread(target=watch, daemon=True)
        self._thread.start()

    def stop(self) -> str:
        """Stop sampling; say the most seen."""
        self._done.set()
        self._thread.join()
        return (
            f"most seen over {self._processes} process(es): anonymous "
            f"{self._most['RssAnon']:.0f} MB, file-backed {self._most['RssFile']:.0f} MB"
        )
