"""The composition root: build a node from Settings, own its lifecycle, serve it, stop it.

Everything a node runs is started and stopped by the application's cleanup
contexts, in one order, whether the app is served by ``serve`` or by a test:
the store, the catalog, the peers' client, the membership, the coordinator
and the background loops. aiohttp stops them in reverse and goes on when
one fails to stop, so every resource is released.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import resource
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from dynamiq.access.guard import Guard
from dynamiq.access.keys import KeyRing
from dynamiq.api.app import build_app
from dynamiq.api.context import SERVICES, Services
from dynamiq.api.intake import Intake
from dynamiq.api.limits import LimitedSite
from dynamiq.cluster.base import FatalHandler, Member, Membership, StaticMembership
from dynamiq.cluster.peers import PeerClient
from dynamiq.cluster.quorum import Quorum
from dynamiq.cluster.swim import SwimMembership
from dynamiq.cluster.wire import PeerSigner
from dynamiq.config import LOOPBACK, Settings, StatsSettings, StorageSettings
from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import Clock, MonotonicClock
from dynamiq.core.custody.journal import LeaseJournal
from dynamiq.core.janitor import Janitor
from dynamiq.core.lifecycle.redrive import Redriver
from dynamiq.core.queues import QueueService
from dynamiq.core.reporter import Reporter
from dynamiq.core.routing.notifications import Envelopes
from dynamiq.core.topics import TopicService
from dynamiq.errors import DynamiqError
from dynamiq.metrics.base import Metrics, MetricsFanout
from dynamiq.metrics.prometheus import PrometheusMetrics
from dynamiq.service.cluster import Coordinator
from dynamiq.service.node import Node
from dynamiq.service.reports import live_nodes
from dynamiq.storage.base import StorageBackend
from dynamiq.storage.diskspace import FreeSpace
from dynamiq.tls import Certificates

__all__ = [
    "CERTIFICATES",
    "STORE",
    "Seat",
    "announce",
    "create_app",
    "listen",
    "open_store",
    "run",
    "runner_options",
    "serve",
]

log = logging.getLogger("dynamiq.daemon")

STORE = web.AppKey("store", StorageBackend)  # the store the app owns (closed at cleanup)
CERTIFICATES = web.AppKey("certificates", Certificates)  # with [tls] only

Context = Callable[[web.Application], AsyncIterator[None]]


@dataclass(frozen=True)
class Seat:
    """Where a process that gossips sits in the cluster: a node of one process
    (``_own_seat``), or one worker of a node, made by its supervisor and kept
    across the worker's restarts.

    A node's workers are members of the cluster, named ``node/0``,
    ``node/1``...: they split the node's slice, and a receive one of them
    cannot fill continues into the others' shares, as between nodes.
    """

    name: str  # the member's name
    peers: socket.socket  # bound: where the other members call this process
    gossip: str  # host:port this process gossips on
    seeds: tuple[str, ...]  # the node's seeds (and its other workers' gossip addresses)
    secret: str  # the cluster's; for a node alone, one its workers share
    quorum: bool  # False for a node alone: its workers wait for no majority of each other


def _own_seat(settings: Settings, sock: socket.socket) -> Seat | None:
    """Return the seat of a node of one process that gossips (its HTTP socket takes the
    peers' calls); None for a node alone."""
    if not settings.gossip:
        return None
    core, cluster = settings.core, settings.cluster
    host = cluster.address or core.httpaddress
    address, seeds = f"{host}:{core.port}", tuple(core.seeds())
    return Seat(core.name, sock, address, seeds, cluster.shared_secret(), quorum=True)


def open_store(
    settings: StorageSettings, pool_size: int = 16, riak_nodes: list[str] | None = None
) -> StorageBackend:
    """Open the configured store (backends are imported only when chosen)."""
    if settings.backend == "riak":
        from dynamiq.storage.riak import RiakBackend

        return RiakBackend(riak_nodes or [], pool_size, timeout=settings.timeout)
    if settings.backend == "redis":
        from dynamiq.storage.redis import RedisBackend

        return RedisBackend(settings.url, settings.waitreplicas, pool_size)
    from dynamiq.storage.lmdb import LmdbBackend

    return LmdbBackend(Path(settings.path).resolve(), map_size=settings.mapsize)


def open_metrics(settings: StatsSettings) -> tuple[Metrics, PrometheusMetrics]:
    """Return the configured sinks and the Prometheus one (``/metrics`` is always served)."""
    prometheus = PrometheusMetrics()
    if settings.type != "statsd":
        return prometheus, prometheus
    from dynamiq.metrics.statsd import StatsdMetrics

    host, _, port = settings.address.rpartition(":")
    return MetricsFanout([StatsdMetrics(host, int(port), settings.prefix), prometheus]), prometheus


def open_membership(settings: Settings, http: str, seat: Seat | None) -> Membership:
    """Return this process's view of the cluster: gossip from its ``seat``, or a node
    alone without one."""
    core, cluster = settings.core, settings.cluster
    if seat is None:
        return StaticMembership(Member(core.name, core.httpaddress, http))
    return SwimMembership(
        seat.name,
        http,
        seat.gossip,
        list(seat.seeds),
        seat.secret,
        cluster.pinginterval,
        cluster.suspecttimeout,
    )


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


def url_of(sock: socket.socket, tls: bool = False) -> str:
    """Return the base URL of a bound socket (``https`` with ``tls``)."""
    host, port = sock.getsockname()[:2]
    scheme = "https" if tls else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def create_app(
    settings: Settings,
    sock: socket.socket,
    clock: Clock | None = None,
    on_fatal: FatalHandler | None = None,
    seat: Seat | None = None,
) -> web.Application:
    """Return the node's application for the HTTP socket ``sock``; it starts when served.

    ``on_fatal`` hears why the node must stop (a twin joined, gossip died);
    by default the error is logged. With a ``seat`` the app is one worker of
    the node, a member of its own.
    """
    store = open_store(
        settings.storage, settings.core.backendconnectionpool, settings.core.riak_nodes()
    )
    clock = clock or MonotonicClock()
    catalog = Catalog(store, clock)
    metrics, prometheus = open_metrics(settings.stats)
    certificates = Certificates(settings.tls) if settings.tls.enabled else None
    seat = seat or _own_seat(settings, sock)
    name = seat.name if seat else settings.core.name
    called_at = seat.peers if seat else sock  # where the other members reach this process
    membership = open_membership(settings, url_of(called_at, certificates is not None), seat)
    # With gossip, nothing is served until the cluster hands this node its slice.
    keyspace = None if seat else membership.slice_of(name)
    journal = LeaseJournal(Path(settings.storage.path) / "journal", name, clock)
    queues = QueueService(
        store,
        catalog,
        clock,
        keyspace=keyspace,
        metrics=metrics,
        journal=journal,
        awake=membership.awake,
    )
    address = settings.core.httpaddress
    keys = KeyRing(store, clock) if settings.auth.on(address) else None
    if keys is None and address not in LOOPBACK:
        log.warning(
            "auth.enabled = false on %s: anyone who reaches this port may read, "
            "delete and drop every queue",
            address,
        )
    janitor = Janitor(
        catalog,
        queues,
        store,
        settings.core.syncconfiginterval / 1000,
        clock,
        (keys.reload,) if keys else (),
    )
    reporter = Reporter(
        queues,
        store,
        metrics,
        settings.stats.flushinterval,
        lambda: len(live_nodes(membership)),
        queue_levels=settings.stats.type == "statsd",
    )
    signer = PeerSigner(seat.secret) if seat else None
    tls = certificates.peer_context if certificates else None
    peers = PeerClient(signer, tls) if signer else None
    counted = seat is not None and seat.quorum  # a node alone's workers count no majority
    quorum = Quorum(name, settings.cluster.suspecttimeout) if peers and counted else None
    coordinator = Coordinator(membership, queues, janitor, peers, quorum)
    catalog.on_change = coordinator.tell_peers
    auth = settings.auth
    guard = Guard(
        keys,
        auth.admin_key() if keys else "",
        auth.failedpersecond,
        auth.failedburst,
        clock,
        coordinator.announced,
    )
    if keys is not None:
        keys.on_change = coordinator.announce
    redriver = Redriver(
        store,
        catalog,
        clock,
        name,
        queues.states,
        queues.life,
    )
    envelopes = Envelopes(settings.sqs.region, settings.sqs.account, clock)
    topics = TopicService(catalog, queues, envelopes, metrics)
    # The embedded store's disk is the node's to watch; other stores watch their own.
    space = (
        FreeSpace(Path(settings.storage.path), settings.limits.diskfreelimit)
        if settings.storage.backend == "lmdb"
        else None
    )
    node = Node(
        catalog,
        queues,
        topics,
        coordinator,
        membership,
        janitor,
        settings.limits,
        redriver,
        space,
    )
    keyless = frozenset(api for api in ("v1", "sqs", "metrics") if getattr(auth, api) == "open")
    services = Services(
        node,
        metrics,
        prometheus.render,
        reporter.report_queues,
        signer,
        settings.sqs,
        guard,
        keyless,
        frozenset(_host_names(settings)),
        Intake(settings.limits.maxpendingbytes),
    )
    app = build_app(services, settings.limits.maxbodybytes)

    async def stop_serving(_: web.Application) -> None:
        await node.stop_serving()  # long polls answer now; the others take this slice now

    app[STORE] = store
    if certificates is not None:
        app[CERTIFICATES] = certificates
    app.on_shutdown.append(stop_serving)
    app.cleanup_ctx.extend(
        [
            _owned(None, store.close),  # exits last
            _owned(space.check if space else None, None),
            _owned(catalog.reload, None),
            _owned(keys.reload if keys else None, None),
            _owned(queues.custody.replay, None),  # counts and leases a kill -9 left
            _owned(None, peers.close if peers else None),
            _owned(lambda: membership.start(on_fatal or _log_fatal), membership.stop),
            _owned(_started(coordinator.start), coordinator.close),
            _owned(redriver.resume, redriver.close),
            _task(janitor.janitor_loop),
            _task(queues.sweep_loop),
            _owned(None, reporter.close),  # after its loop: cleanups run last first
            _task(reporter.reporter_loop),
            _task(trim_memory_loop),
            *([_task(space.watch_loop)] if space else []),
        ]
    )
    return app


def _host_names(settings: Settings) -> list[str]:
    """The names a node answers to while keys are off: loopback's, its own, the configured."""
    own = [settings.core.httpaddress, settings.cluster.address, socket.gethostname()]
    named = [n.lower().strip("[]") for n in own if n and n not in ("0.0.0.0", "::")]
    return [*LOOPBACK, *named, *settings.auth.host_names()]


def _log_fatal(error: DynamiqError) -> None:
    log.error("this node cannot go on: %s", error)


def _started(start: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        start()

    return run


def _owned(
    start: Callable[[], Awaitable[object]] | None, stop: Callable[[], Awaitable[None]] | None
) -> Context:
    """Return a cleanup context that runs ``start`` at start-up and ``stop`` at cleanup."""

    async def ctx(_: web.Application) -> AsyncIterator[None]:
        if start is not None:
            await start()
        yield
        if stop is not None:
            await stop()

    return ctx


def _task(loop_fn: Callable[[], Coroutine[None, None, None]]) -> Context:
    """Return a cleanup context that runs ``loop_fn`` as a task, cancelled at cleanup."""

    async def ctx(_: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(loop_fn())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return ctx


async def trim_memory_loop(interval: float = 10.0) -> None:
    """Hand freed heap memory back to the OS now and then (glibc keeps it otherwise).

    Bursts (large batches, the recent-records cache) leave free memory in
    malloc's arenas; without this RSS shows the high-water mark, not what the
    node holds.
    """
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return  # not glibc
    while True:
        await asyncio.sleep(interval)
        trim(0)


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
                runner, served, limits.maxconnections, backlog=limits.backlog, ssl_context=tls
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
        "access_log": None,
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
    walks it again. The youngest generation is collected every 10,000 new
    objects instead of 700: under a burst of 2,000 requests the collector took
    a tenth of the node's time, and its full collections walked every live
    request while the event loop stood still.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, *gc.get_threshold()[1:])


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
    storage = settings.storage
    where = {
        "lmdb": f"lmdb data in {Path(storage.path).resolve()}",
        "redis": f"redis store at {storage.url}",
        "riak": f"riak store at {settings.core.riaknodes}",
    }[storage.backend]
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
