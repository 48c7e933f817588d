"""The node's process: its sockets, its signals, its tuning, and serving until told to stop.

What the node is made of is ``wiring``'s; this module binds the HTTP socket
before the app is built, serves the app on it (and a worker's peer socket),
tunes the interpreter and the process for many connections, and stops on
SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import resource
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web

from dynamiq.api.context import SERVICES
from dynamiq.api.front.connection import FRONT
from dynamiq.api.front.lent import Answered
from dynamiq.api.limits import LimitedSite
from dynamiq.config import Settings
from dynamiq.errors import DynamiqError
from dynamiq.process.seat import Seat, url_of
from dynamiq.process.wiring import CERTIFICATES, create_app
from dynamiq.storage.factory import describe

__all__ = ["announce", "listen", "run", "runner_options", "serve"]

log = logging.getLogger("dynamiq.process.daemon")


def listen(
    settings: Settings, port: int | None = None, shared: bool = False, host: str = ""
) -> socket.socket:
    """Bind the node's HTTP socket (port 0: one the OS picks), before the app is built.

    ``port`` and ``host`` replace the configured ones; ``shared`` binds with
    ``SO_REUSEPORT``, so the node's workers each listen on the same port and
    the kernel spreads new connections between them.
    """
    host = host or settings.core.httpaddress
    port = settings.core.httpport if port is None else port
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if shared:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


# The LMDB writer thread gives up the GIL inside every put and delete. With
# the default 5 ms switch interval, taking it back from a busy event loop can
# cost up to 5 ms each time (a commit of 100 deletes took 20-120 ms); at
# 100 us group commits stay short.
GIL_SWITCH_SECONDS = 0.0001


async def serve(
    settings: Settings,
    ready: Callable[[str], None] | None = None,
    seat: Seat | None = None,
    sock: socket.socket | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT; a second signal exits at once.

    ``ready`` hears the node's URL once it serves. A worker of a node
    (``seat``) serves the node's shared socket ``sock`` and its own for the
    peers, and leaves announcing the node to its supervisor.

    Raises:
        DynamiqError: the node could not start, or had to stop (``on_fatal``).
        OSError: the HTTP port cannot be bound.
    """
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
    stop = asyncio.Event()
    failure: list[DynamiqError] = []

    def on_fatal(error: DynamiqError) -> None:
        log.error("stopping: %s", error)
        failure.append(error)
        stop.set()

    _raise_file_limit()
    sock = sock or listen(settings)
    url = url_of(sock, settings.tls.enabled)
    app = create_app(settings, sock, on_fatal=on_fatal, seat=seat)
    certificates = app.get(CERTIFICATES)
    limits = settings.limits
    tls = certificates.server if certificates else None
    runner = web.AppRunner(app, handle_signals=False, **runner_options(settings))
    try:
        await runner.setup()
        for served in (sock, seat.peers) if seat else (sock,):
            site = LimitedSite(
                runner,
                served,
                limits.maxconnections,
                backlog=limits.backlog,
                ssl_context=tls,
                front=app.get(FRONT),
            )
            await site.start()
        _settle_memory()
        if seat is None:
            announce(settings, url, runner.app[SERVICES].node.membership.address)
        if ready:
            ready(url)
        _on_signals(stop)
        if certificates is not None:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, certificates.reload)
        await stop.wait()
    finally:
        await runner.cleanup()
        sock.close()
    log.info("stopped")
    if failure:
        raise failure[0]


def runner_options(settings: Settings) -> dict[str, Any]:
    """How aiohttp serves the node's connections (for ``serve`` and the tests' server)."""
    return {
        # No access log: aiohttp's calls tell the front end a lent request is answered.
        "access_log_class": Answered,
        "access_log": log,
        "shutdown_timeout": settings.limits.shutdowntimeout,
        # Armed when a connection opens and after each answer: a client that sends
        # no whole request's headers in this time is cut off (slowloris).
        "keepalive_timeout": settings.limits.idletimeout,
        # No SO_KEEPALIVE: the idle timeout closes an idle connection long before
        # the kernel's first probe (2 h), and setting it costs each connection.
        "tcp_keepalive": False,
    }


def _settle_memory() -> None:
    """Keep the collector's pauses short under bursts of requests.

    What start-up made lives as long as the node: frozen, the collector never
    walks it again. The youngest generation is collected every 100,000 new
    objects instead of 700. Under a burst of 2,000 requests the collector took
    a tenth of the node's time, and its full collections walked every live
    request while the event loop stood still. A publish to 10,000 queues holds
    about 50,000 objects until it is answered: collected every 10,000, each
    one was walked and promoted twice, and the full collections that followed
    (25-45 ms each with 10,000 queues known) came every publish or two.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, *gc.get_threshold()[1:])


def _raise_file_limit() -> None:
    """Let the node hold as many sockets as the system allows it (the soft limit,
    often 1,024, would refuse clients long before memory or CPU run out)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        log.debug("open files: %d allowed (was %d)", hard, soft)


def _on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            os._exit(1)
        log.info("stopping: finishing in-flight requests (signal again to exit at once)")
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)


def announce(settings: Settings, url: str, gossip: str, workers: int = 1) -> None:
    """Say on stdout that the node serves ``url`` (the line scripts wait for)."""
    log.info("node %s serving %s", settings.core.name, url)
    where = describe(settings)
    processes = f"; {workers} workers" if workers > 1 else ""
    gossiping = f"; gossip {gossip}" if gossip else ""
    line = f"dynamiq: node {settings.core.name} serving {url}; {where}{processes}{gossiping}"
    print(line, flush=True)


def run(main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` to its end on uvloop when it is installed, else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)
