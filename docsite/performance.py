"""The performance page, made from the recorded runs in ``bench/results/``: the latest
run of each bench with the command that made it, a plot of W1's history, and every
earlier run below.

A run is a Markdown file with a front matter of ``bench``, ``title``, ``date``,
``commit`` (the commit the figures were recorded at), ``machine`` and ``command``,
and optionally ``e2e`` (W1's end-to-end msg/s, ``dynamiq`` and ``redis-always``) for
the history's plot.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["RESULTS", "Run", "history_plot", "page", "runs"]

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results"
FIELDS = ("bench", "title", "date", "commit", "machine", "command")
PLOTS = ("soak-1node.png", "soak-3node.png")  # made by ``python -m bench.soak``


@dataclass(frozen=True, slots=True)
class Run:
    """One recorded run of a bench."""

    name: str
    meta: dict[str, Any]
    body: str

    @property
    def bench(self) -> str:
        return str(self.meta["bench"])

    def section(self, level: int) -> str:
        """The run as the page shows it: a heading, where it came from, the figures."""
        m = self.meta
        return (
            f"{'#' * level} {m['title']} ({m['date']})\n\n"
            f"`{m['command']}` at commit `{m['commit']}`, on {m['machine']}"
            f" (`bench/results/{self.name}`).\n\n{self.body.strip()}\n"
        )


def runs(folder: Path = RESULTS) -> list[Run]:
    """Every recorded run, oldest first; a file missing a field is an error."""
    found = []
    for path in sorted(folder.glob("*.md")):
        _, front, body = path.read_text(encoding="utf-8").split("---\n", 2)
        meta = yaml.safe_load(front)
        missing = [f for f in FIELDS if not meta.get(f)]
        if missing:
            raise ValueError(f"{path.name}: no {', '.join(missing)} in its front matter")
        found.append(Run(path.name, meta, body))
    return sorted(found, key=lambda r: (str(r.meta["date"]), r.name))


def history_plot(recorded: list[Run]) -> bytes:
    """W1 end to end, the node against Redis with ``appendfsync always``, run by run."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    w1 = [r for r in recorded if "e2e" in r.meta]
    figure, axis = plt.subplots(figsize=(8, 3.5), dpi=100)
    labels = [f"{r.meta['date']}\n{r.meta['commit']}" for r in w1]
    for system in ("dynamiq", "redis-always"):
        axis.plot(labels, [r.meta["e2e"][system] for r in w1], marker="o", label=system)
    axis.set_ylabel("end-to-end msg/s")
    axis.set_title("W1, every message fsynced, in the same run as Redis")
    axis.legend()
    axis.grid(alpha=0.3)
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png")
    plt.close(figure)
    return out.getvalue()


def page(recorded: list[Run]) -> str:
    """The page's Markdown."""
    latest: dict[str, Run] = {}
    for run in recorded:
        latest[run.bench] = run
    lines = [
        "# Performance",
        "",
        "Every figure is from one run on a 2-core machine, the peers (Redis, RabbitMQ)"
        " in the same run, so the ratios hold where the absolute rates drift with the"
        " machine. Each run is a file in `bench/results/`; how to run the benches and"
        " what each number means is in `bench/README.md`.",
        "",
        "## The latest run of each bench",
        "",
        "| bench | run | date | command |",
        "| --- | --- | --- | --- |",
    ]
    for run in sorted(latest.values(), key=lambda r: r.bench):
        slug = run.name.removesuffix(".md")
        lines.append(
            f"| {run.bench} | [{run.meta['title']}](#{slug}) | {run.meta['date']} "
            f"| `{run.meta['command']}` |"
        )
    lines += [
        "",
        "## History",
        "",
        "![W1 end to end, run by run](performance/w1-history.png)",
        "",
        "The soak, an hour of W1 with memory, descriptors, the store's size and latency"
        " over time (`python -m bench.soak`):",
        "",
        *[f"![{plot}](performance/{plot})" for plot in PLOTS],
        "",
        "## Runs, latest first",
        "",
    ]
    for run in reversed(recorded):
        lines += [f'<a id="{run.name.removesuffix(".md")}"></a>', "", run.section(3)]
    return "\n".join(lines)
