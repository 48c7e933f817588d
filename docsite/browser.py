"""Chromium as the site's reader sees it: Debian's Chromium driven by Playwright, and the
built site served over HTTP on loopback (the search needs a page served, not a file)."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["CHROMIUM", "launch", "served"]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def launch(playwright: Any) -> Any:
    """A headless Chromium of this machine's."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=list(ARGS))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Keep the requests out of the output."""


@contextmanager
def served(folder: Path) -> Iterator[str]:
    """Serve ``folder`` at a loopback URL while the block runs."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="docs-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
