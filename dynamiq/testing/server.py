"""A node served in this process for tests: the same app, started and stopped as ``serve`` does.

The HTTP socket is bound before the app is built (port 0: the OS picks), so
the node knows its own URL from the start, as under ``dynamiq serve``; and
handlers are not cancelled when a client goes away, as under ``serve``.
"""

from __future__ import annotations

import socket
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from aiohttp.web_runner import BaseRunner
from yarl import URL

from dynamiq.api.front.connection import FRONT
from dynamiq.api.limits import LimitedSite
from dynamiq.config import Settings
from dynamiq.core.clock import Clock
from dynamiq.process.daemon import listen, runner_options
from dynamiq.process.wiring import create_app

__all__ = ["NodeServer", "node_client"]


class NodeServer(TestServer):
    """A test server on a socket bound beforehand, with ``serve``'s runner options and
    its site (the connection limit, the node's front end)."""

    def __init__(self, app: web.Application, sock: socket.socket, settings: Settings) -> None:
        super().__init__(app, socket_factory=lambda *_: sock)
        self._sock = sock
        self._options = runner_options(settings)
        self._limits = settings.limits

    async def _make_runner(self, **kwargs: Any) -> BaseRunner:
        options = ("keepalive_timeout", "access_log_class", "access_log")
        kwargs |= {"handler_cancellation": False} | {k: self._options[k] for k in options}
        return await super()._make_runner(**kwargs)

    async def start_server(self, loop: Any = None, **kwargs: Any) -> None:
        """Serve the app on the bound socket as ``serve`` does."""
        if self.runner:
            return
        self.runner = await self._make_runner(**kwargs)
        await self.runner.setup()
        limits = self._limits
        site = LimitedSite(
            self.runner,
            self._sock,
            limits.maxconnections,
            backlog=limits.backlog,
            front=self.app.get(FRONT),
        )
        await site.start()
        self.host, self.port = self._sock.getsockname()[:2]
        self.scheme = self.scheme or "http"
        self._root = URL(f"{self.scheme}://{self.host}:{self.port}")


async def node_client(settings: Settings, clock: Clock | None = None) -> TestClient[Any, Any]:
    """Start a node app for ``settings`` and return a started client of it (close it after)."""
    sock = listen(settings)
    try:
        server = NodeServer(create_app(settings, sock, clock), sock, settings)
    except BaseException:
        sock.close()
        raise
    client: TestClient[Any, Any] = TestClient(server)
    try:
        await client.start_server()
    except BaseException:
        await client.close()
        raise
    return client
