"""MkDocs hooks: the generated pages join the site's files before the build reads them."""

from __future__ import annotations

from typing import Any

from mkdocs.structure.files import File, Files

from docsite import performance, reference


def on_files(files: Files, config: Any) -> Files:
    """Add the reference pages, the performance page and its plots."""
    for path, make in reference.PAGES.items():
        files.append(File.generated(config, path, content=make()))
    recorded = performance.runs()
    files.append(File.generated(config, "performance.md", content=performance.page(recorded)))
    plot = performance.history_plot(recorded)
    files.append(File.generated(config, "performance/w1-history.png", content=plot))
    for name in performance.PLOTS:
        content = (performance.RESULTS / name).read_bytes()
        files.append(File.generated(config, f"performance/{name}", content=content))
    return files
