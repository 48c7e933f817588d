"""An HTTP endpoint for push subscriptions to deliver to, as a service would run one: a
real aiohttp server on loopback (in a thread of its own, so that synchronous clients
such as boto3 can drive the node meanwhile), answering each POST as its ``answer``
says and keeping what it got. For the tests and the chaos command.

It runs on uvloop: asyncio's own loop (CPython 3.11) makes a Python socket for
each connection it accepts and, when the accept cannot finish (the server
closing, or a node killed while it pushes), leaves it to the garbage
collector, whose warning then fails whichever test is running. uvloop accepts
in C and hands the connection to its transport at once."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import uvloop
from aiohttp import web

__all__ = ["Delivery", "Receiver"]


@dataclass(frozen=True)
class Delivery:
    """One POST the endpoint got."""

    path: str
    headers: dict[str, str]
    body: bytes

    def document(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed

    def message(self) -> str:
        """The message a notification carries: its document's, or the raw body."""
        if self.headers.get("x-amz-sns-rawdelivery") == "true":
            return self.body.decode()
        return str(self.document()["Message"])

    @property
    def kind(self) -> str:
        return self.headers.get("x-amz-sns-message-type", "")


class Receiver:
    """A running endpoint; ``answer(delivery)`` gives each POST's status (200 by default)."""

    def __init__(
        self,
        answer: Callable[[Delivery], int] | None = None,
        delay: float = 0.0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.answer = answer or (lambda _: 200)
        self.delay = delay  # seconds before each answer (a slow endpoint)
        self.tls = tls  # serves HTTPS with it
        self.got: list[Delivery] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self._loop = uvloop.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._thread.start()
        self._ready.wait(10)

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}/hook"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._take)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        listening = socket.socket()
        listening.bind(("127.0.0.1", 0))
        self.port = listening.getsockname()[1]
        await web.SockSite(self._runner, listening, ssl_context=self.tls).start()

    async def _take(self, request: web.Request) -> web.Response:
        delivery = Delivery(
            request.path, {k.lower(): v for k, v in request.headers.items()}, await request.read()
        )
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            self.got.append(delivery)
            return web.Response(status=self.answer(delivery))
        finally:
            self.in_flight -= 1

    async def _stop(self) -> None:
        """Stop serving, every connection cut (not closed politely: a TLS goodbye
        would outlive the loop)."""
        if self._runner is None:
            return
        server = self._runner.server
        for handler in list(server.connections) if server is not None else []:
            if handler.transport is not None:
                handler.transport.abort()
        await self._runner.cleanup()
        await asyncio.sleep(0)  # the cut connections' last callbacks

    def of(self, kind: str) -> list[Delivery]:
        return [d for d in list(self.got) if d.kind == kind]

    def wait_for(self, kind: str, count: int = 1, within: float = 20.0) -> list[Delivery]:
        """The first ``count`` deliveries of ``kind``, once they came."""
        deadline = time.monotonic() + within
        while True:
            found = self.of(kind)
            if len(found) >= count:
                return found
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        raise AssertionError(f"{len(self.of(kind))} of {count} {kind} deliveries came")

    async def arrived(self, kind: str, count: int = 1, within: float = 20.0) -> list[Delivery]:
        """``wait_for`` from a test's event loop (which a node in the test serves)."""
        return await asyncio.to_thread(self.wait_for, kind, count, within)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
