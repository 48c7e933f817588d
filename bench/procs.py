"""A node's processes as ``/proc`` shows them: the node and its workers, summed."""

from __future__ import annotations

from pathlib import Path

__all__ = ["memory_mib", "processes"]


def processes(pid: int) -> list[int]:
    """``pid`` and every process under it (a node's workers), parents first."""
    found, i = [pid], 0
    while i < len(found):
        for task in Path(f"/proc/{found[i]}/task").glob("*/children"):
            found += [int(child) for child in task.read_text().split()]
        i += 1
    return found


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise ValueError(f"no {field} for process {pid}")


def memory_mib(pid: int, field: str = "VmHWM") -> float:
    """Memory of ``pid`` and its workers, summed, in MiB: the peak (``VmHWM``), the
    resident (``VmRSS``), or its anonymous (``RssAnon``) or file-backed (``RssFile``)
    part. Each process's own peak is summed: an upper bound of the node's peak;
    file-backed pages the workers share (the LMDB map) are counted once per worker.
    """
    return sum(_status_kib(p, field) for p in processes(pid)) / 1024
