"""What commands print: JSON for machines, aligned tables and progress for people.

With ``rich`` installed and a terminal, tables are drawn and long work shows
a progress bar with its rate and time left; otherwise tables are plain
aligned columns and progress is a line on stderr every few seconds. Both
are tested; ``--json`` prints one JSON document (or one JSON line per
message) and nothing else on stdout.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any, Protocol

__all__ = ["Output", "Progress"]

PLAIN_PROGRESS_SECONDS = 2.0


class Progress(Protocol):
    """Long work's progress: ``advance`` as items are done, ``close`` at the end."""

    def advance(self, count: int) -> None: ...

    def close(self) -> None: ...


class Output:
    """Where and how a command prints."""

    def __init__(
        self, as_json: bool, out: IO[str] | None = None, err: IO[str] | None = None
    ) -> None:
        self.as_json = as_json
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self._rich = _rich_console(self.out)

    def json(self, value: Any) -> None:
        """Print one JSON document."""
        self.out.write(json.dumps(value, default=str) + "\n")
        self.out.flush()

    def result(
        self, value: Any, headers: Sequence[str] = (), rows: Sequence[Sequence[Any]] = ()
    ) -> None:
        """Print ``value`` as JSON with ``--json``, else ``rows`` as a table (or, without
        headers, ``value`` as fields)."""
        if self.as_json:
            self.json(value)
        elif headers:
            self.table(headers, rows)
        elif isinstance(value, Mapping):
            self.fields(value)
        elif value is not None:
            self.line(str(value))

    def line(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def note(self, text: str) -> None:
        """Tell the person something on stderr (never in the way of stdout's data)."""
        if not self.as_json:
            self.err.write(text + "\n")
            self.err.flush()

    def fields(self, value: Mapping[str, Any]) -> None:
        """Print a mapping as ``name  value`` lines, nested names joined by dots."""
        rows: list[tuple[str, Any]] = []
        _flatten(value, "", rows)
        self.table(("field", "value"), rows, header=False)

    def table(
        self, headers: Sequence[str], rows: Sequence[Sequence[Any]], header: bool = True
    ) -> None:
        cells = [[_cell(v) for v in row] for row in rows]
        if self._rich is not None:
            from rich.table import Table

            table = Table(*headers, show_header=header, header_style="bold")
            for row in cells:
                table.add_row(*row)
            self._rich.print(table)
            return
        lines = [list(headers)] if header else []
        lines += cells
        widths = [max(len(line[i]) for line in lines) for i in range(len(headers))] if lines else []
        for line in lines:
            text = "  ".join(
                v.ljust(w) if i < len(widths) - 1 else v
                for i, (v, w) in enumerate(zip(line, widths, strict=True))
            )
            self.out.write(text.rstrip() + "\n")
        self.out.flush()

    def progress(self, label: str, total: int | None) -> Progress:
        """Start showing the progress of ``total`` items (None: unknown) on stderr."""
        console = _rich_console(self.err)
        if console is not None and not self.as_json:
            return _RichProgress(console, label, total)
        return _PlainProgress(self.err, label, total, quiet=self.as_json)


def _flatten(value: Mapping[str, Any], prefix: str, rows: list[tuple[str, Any]]) -> None:
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            _flatten(item, name + ".", rows)
        else:
            rows.append((name, item))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def _rich_console(stream: IO[str]) -> Any:
    """A rich console on ``stream`` when it is a terminal and rich is installed."""
    if not stream.isatty():
        return None
    try:
        from rich.console import Console
    except ImportError:
        return None
    return Console(file=stream)


class _PlainProgress:
    """A line on stderr every few seconds, and one at the end."""

    def __init__(self, err: IO[str], label: str, total: int | None, quiet: bool) -> None:
        self._err, self._label, self._total, self._quiet = err, label, total, quiet
        self._done = 0
        self._start = self._last = time.monotonic()

    def advance(self, count: int) -> None:
        self._done += count
        now = time.monotonic()
        if now - self._last >= PLAIN_PROGRESS_SECONDS:
            self._last = now
            self._print(now)

    def close(self) -> None:
        self._print(time.monotonic(), final=True)

    def _print(self, now: float, final: bool = False) -> None:
        if self._quiet:
            return
        elapsed = max(now - self._start, 1e-9)
        rate = self._done / elapsed
        of = f"/{self._total:,}" if self._total is not None else ""
        text = f"{self._label}: {self._done:,}{of} ({rate:,.0f}/s"
        if final:
            text += f", {elapsed:.1f} s)"
        elif self._total is not None and rate > 0:
            text += f", ETA {max(self._total - self._done, 0) / rate:,.0f} s)"
        else:
            text += ")"
        self._err.write(text + "\n")
        self._err.flush()


class _RichProgress:
    """A progress bar with the count, the rate and the time left."""

    def __init__(self, console: Any, label: str, total: int | None) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
        )
        self._task = self._bar.add_task(label, total=total, rate="")
        self._bar.start()

    def advance(self, count: int) -> None:
        self._bar.advance(self._task, count)
        speed = self._bar.tasks[0].speed
        if speed is not None:
            self._bar.update(self._task, rate=f"{speed:,.0f}/s")

    def close(self) -> None:
        self._bar.stop()
