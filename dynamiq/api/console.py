"""The web console: static files from the package, served by every node."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

__all__ = ["index", "routes", "sends_a_file"]

CONSOLE = Path(__file__).with_name("console")


def routes() -> list[web.AbstractRouteDef]:
    """Return the console's assets under ``/console/`` (its page, ``/``, is served by
    the SQS and SNS endpoint's ``GET /`` to every request that names no action)."""
    return [web.static("/console", CONSOLE)]


def sends_a_file(method: str, path: str) -> bool:
    """Whether a request is one of the console's, answered with a file."""
    return method in ("GET", "HEAD") and (path == "/" or path.startswith("/console/"))


async def index(request: web.Request) -> web.FileResponse:
    """Serve the console page."""
    return web.FileResponse(CONSOLE / "index.html", headers={"Cache-Control": "no-cache"})
