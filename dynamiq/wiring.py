"""The composition root: a node's parts built from Settings, and the order they run in.

Everything a node runs is started and stopped by the application's cleanup
contexts, in one order, whether the app is served by ``daemon.serve`` or by
a test: the store, the catalog, the peers' client, the membership, the
cluster parts and the background loops. aiohttp stops them in reverse and
goes on when one fails to stop, so every resource is released. Sockets,
signals and the process's tuning are ``daemon``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from dynamiq.access.guard import Guard
from dynamiq.access.keys import KeyRing
from dynamiq.api.app import build_app
from dynamiq.api.console import sends_a_file
from dynamiq.api.context import SERVICES, Services
from dynamiq.api.delivery import DEPARTURES
from dynamiq.api.front import FRONT, Front
from dynamiq.api.intake import Intake
from dynamiq.api.v2_front import V2Front
from dynamiq.cluster.base import FatalHandler, Member, Membership, StaticMembership
from dynamiq.cluster.board import Board
from dynamiq.cluster.peers import PeerClient
from dynamiq.cluster.quorum import Quorum
from dynamiq.cluster.swim import SwimMembership
from dynamiq.cluster.wire import PeerSigner
from dynamiq.config import LOOPBACK, LimitsSettings, Settings, StatsSettings
from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import Clock, MonotonicClock
from dynamiq.core.custody.journal import LeaseJournal
from dynamiq.core.janitor import Janitor
from dynamiq.core.lifecycle.redrive import Redriver
from dynamiq.core.queues import QueueService
from dynamiq.core.reporter import Reporter
from dynamiq.core.routing.notifications import Envelopes
from dynamiq.core.spreads import Spreader
from dynamiq.core.topics import TopicService
from dynamiq.endpoints import EndpointRules
from dynamiq.errors import DynamiqError
from dynamiq.metrics.base import Metrics, MetricsFanout
from dynamiq.metrics.prometheus import PrometheusMetrics
from dynamiq.push_client import HttpPoster
from dynamiq.service.node import Node
from dynamiq.service.parts import Cluster, Engine
from dynamiq.service.pusher import Pusher
from dynamiq.service.reach import Reach
from dynamiq.service.reports import live_nodes
from dynamiq.service.webhooks import Webhooks
from dynamiq.storage.base import StorageBackend
from dynamiq.storage.factory import describe, open_store
from dynamiq.storage.version import claim_format
from dynamiq.tls import Certificates

__all__ = ["CERTIFICATES", "STORE", "Seat", "create_app", "url_of"]

log = logging.getLogger("dynamiq.daemon")

STORE = web.AppKey("store", StorageBackend)  # the store the app owns (closed at cleanup)
CERTIFICATES = web.AppKey("certificates", Certificates)  # with [tls] only
STOP_AGAIN_SECONDS = 1.0  # a background loop still running this long after its cancel

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
    board: Board | None = None  # what the node's workers tell each other without a call


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
    clock = clock or MonotonicClock()
    seat = seat or _own_seat(settings, sock)
    certificates = Certificates(settings.tls) if settings.tls.enabled else None
    store, space = open_store(settings)
    metrics, prometheus = open_metrics(settings.stats)
    signer = PeerSigner(seat.secret) if seat else None  # signs and checks members' calls
    reach = _reach(settings, sock, seat, signer, certificates)
    keys = _keys(settings, store, clock, reach)
    engine = _engine(settings, store, clock, metrics, reach, keys)
    counted = seat is not None and seat.quorum  # a node alone's workers count no majority
    quorum = Quorum(reach.me(), settings.cluster.suspecttimeout) if counted else None
    cluster = Cluster.build(reach, quorum, engine.queues, engine.janitor)
    rules = _endpoint_rules(settings, sock, seat)
    webhooks = Webhooks(
        engine.catalog,
        engine.queues,
        store,
        rules,
        clock,
        settings.push.url or _public_url(settings, sock, certificates is not None),
        settings.sqs.region,
        settings.sqs.account,
    )
    node = Node(engine, cluster, settings.limits, space, webhooks)
    poster = HttpPoster(
        rules, settings.push.timeout, settings.push.connecttimeout, settings.push.cafile
    )
    pusher = Pusher(
        webhooks,
        engine.catalog,
        engine.queues,
        cluster.majority,
        poster,
        node.publish,
        clock,
        metrics,
        settings.push.concurrency,
        settings.push.timeout,
    )
    reporter = Reporter(
        engine.queues,
        store,
        metrics,
        settings.stats.flushinterval,
        lambda: len(live_nodes(reach.membership)),
        queue_levels=settings.stats.type == "statsd",
    )
    services = Services(
        node=node,
        metrics=metrics,
        render_metrics=prometheus.render,
        read_levels=reporter.report_queues,
        peers=signer,
        sqs=settings.sqs,
        guard=_guard(settings, keys, clock, reach),
        keyless=frozenset(
            api for api in ("v1", "sqs", "metrics") if getattr(settings.auth, api) == "open"
        ),
        hosts=frozenset(_host_names(settings)),
        intake=Intake(settings.limits.maxpendingbytes),
    )
    app = build_app(services, settings.limits.maxbodybytes)
    app[STORE] = store
    if certificates is not None:
        app[CERTIFICATES] = certificates
    _run(app, node, engine, cluster, reporter, keys, on_fatal or _log_fatal, describe(settings))
    if settings.core.front == "on":
        _front(app, settings.limits)

    app.cleanup_ctx.extend(
        [_owned(webhooks.start, poster.close), _task(pusher.pusher_loop)]  # after the catalog
    )
    return app


def _front(app: web.Application, limits: LimitsSettings) -> None:
    """Serve v2's hot routes from the node's own front end (``core.front``); its
    requests are answered at shutdown after the node stopped serving."""
    lookup = V2Front(app[SERVICES], app[DEPARTURES]).lookup
    front = Front(
        lookup,
        lambda head: not sends_a_file(head.method, head.path),  # sendfile wants its transport
        limits.idletimeout,
        limits.maxbodybytes,
        limits.shutdowntimeout,
    )
    app[FRONT] = front
    app.on_shutdown.append(front.on_shutdown)


def _run(
    app: web.Application,
    node: Node,
    engine: Engine,
    cluster: Cluster,
    reporter: Reporter,
    keys: KeyRing | None,
    on_fatal: FatalHandler,
    where: str,
) -> None:
    """Start the node's parts with the app, and stop them with it, in one order (``where``:
    the store, as a refusal of its format names it)."""
    store, membership, space = app[STORE], cluster.reach.membership, node.space
    client = cluster.reach.client

    async def stop_serving(_: web.Application) -> None:
        await node.stop_serving()  # long polls answer now; the others take this slice now

    app.on_shutdown.append(stop_serving)
    app.cleanup_ctx.extend(
        [
            _owned(None, store.close),  # exits last
            _owned(lambda: claim_format(store, where), None),  # before a byte is read
            _owned(space.check if space else None, None),
            _owned(engine.catalog.reload, None),
            _owned(keys.reload if keys else None, None),
            _owned(engine.queues.custody.replay, None),  # counts and leases a kill -9 left
            _owned(None, client.close if client else None),
            _owned(lambda: membership.start(on_fatal), membership.stop),
            _owned(_started(cluster.start), cluster.close),
            _owned(engine.redriver.resume, engine.redriver.close),
            _task(engine.janitor.janitor_loop),
            _task(engine.spreader.spread_loop),
            _task(engine.queues.sweep_loop),
            _owned(None, reporter.close),  # after its loop: cleanups run last first
            _task(reporter.reporter_loop),
            _task(trim_memory_loop),
            *([_task(space.watch_loop)] if space else []),
        ]
    )


def _endpoint_rules(settings: Settings, sock: socket.socket, seat: Seat | None) -> EndpointRules:
    """The ``[push]`` rules, this node's own ports (HTTP, gossip) and addresses among them."""
    ports = {sock.getsockname()[1]}
    if seat is not None:
        ports.add(int(seat.gossip.rpartition(":")[2]))
        ports.add(seat.peers.getsockname()[1])
    own = [settings.core.httpaddress, settings.cluster.address]
    return EndpointRules(settings.push.allow, settings.push.deny, ports, own)


def _public_url(settings: Settings, sock: socket.socket, tls: bool) -> str:
    """Where endpoints reach this node when ``push.url`` does not say: its own address
    (the cluster's address or the host's name when it listens on every address)."""
    url = url_of(sock, tls)
    host = sock.getsockname()[0]
    if host in ("0.0.0.0", "::"):
        named = settings.cluster.address or socket.gethostname()
        url = url.replace(f"[{host}]" if ":" in host else host, named, 1)
    return url


def _own_seat(settings: Settings, sock: socket.socket) -> Seat | None:
    """Return the seat of a node of one process that gossips (its HTTP socket takes the
    peers' calls); None for a node alone."""
    if not settings.gossip:
        return None
    core, cluster = settings.core, settings.cluster
    host = cluster.address or core.httpaddress
    address, seeds = f"{host}:{core.port}", tuple(core.seeds())
    return Seat(core.name, sock, address, seeds, cluster.shared_secret(), quorum=True)


def _reach(
    settings: Settings,
    sock: socket.socket,
    seat: Seat | None,
    signer: PeerSigner | None,
    certificates: Certificates | None,
) -> Reach:
    """This process's view of the cluster, and its client to the other members (none
    for a node alone)."""
    called_at = seat.peers if seat else sock  # where the other members reach this process
    membership = open_membership(settings, url_of(called_at, certificates is not None), seat)
    if signer is None:
        return Reach(membership, None)
    tls = certificates.peer_context if certificates else None
    return Reach(membership, PeerClient(signer, tls), seat.board if seat else None)


def _keys(settings: Settings, store: StorageBackend, clock: Clock, reach: Reach) -> KeyRing | None:
    """The cluster's application keys, or None where keys are off (said when it matters)."""
    address = settings.core.httpaddress
    if settings.auth.on(address):
        return KeyRing(store, clock, on_change=reach.announce)
    if address not in LOOPBACK:
        log.warning(
            "auth.enabled = false on %s: anyone who reaches this port may read, "
            "delete and drop every queue",
            address,
        )
    return None


def _engine(
    settings: Settings,
    store: StorageBackend,
    clock: Clock,
    metrics: Metrics,
    reach: Reach,
    keys: KeyRing | None,
) -> Engine:
    """The queue engine, on ``store``; catalog changes are told to the peers."""
    membership, name = reach.membership, reach.me()
    interval = settings.core.syncconfiginterval / 1000
    # The log of changes outlives many rounds: a process behind it reads everything.
    catalog = Catalog(store, clock, on_change=reach.tell_peers, keep_log=max(60.0, 30 * interval))
    # With gossip, nothing is served until the cluster hands this node its slice.
    keyspace = None if reach.client else membership.slice_of(name)
    queues = QueueService(
        store,
        catalog,
        clock,
        keyspace=keyspace,
        metrics=metrics,
        journal=LeaseJournal(Path(settings.storage.path) / "journal", name, clock),
        awake=membership.awake,
        stirred=reach.board.stir if reach.board else None,
    )
    reloads = (keys.reload,) if keys else ()
    janitor = Janitor(queues, interval, reloads)
    redriver = Redriver(queues.context, name, queues.states, queues.life)
    envelopes = Envelopes(settings.sqs.region, settings.sqs.account, clock)
    spreader = Spreader(queues, settings.limits.syncfanout)
    topics = TopicService(catalog, queues, envelopes, metrics, spreader)
    return Engine(catalog, queues, topics, janitor, redriver, spreader)


def _guard(settings: Settings, keys: KeyRing | None, clock: Clock, reach: Reach) -> Guard:
    """The door requests pass: their key's principal, and the rate of failed ones."""
    auth = settings.auth
    return Guard(
        keys,
        auth.admin_key() if keys else "",
        auth.failedpersecond,
        auth.failedburst,
        clock,
        reach.announced,
    )


def open_metrics(settings: StatsSettings) -> tuple[Metrics, PrometheusMetrics]:
    """Return the configured sinks and the Prometheus one (``/metrics`` is always served)."""
    prometheus = PrometheusMetrics(settings.maxqueueseries)
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


def url_of(sock: socket.socket, tls: bool = False) -> str:
    """Return the base URL of a bound socket (``https`` with ``tls``)."""
    host, port = sock.getsockname()[:2]
    scheme = "https" if tls else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


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
        # Asked again while it runs: a call in the loop's path may swallow a
        # cancellation that arrives as it finishes (one did in upkeep on a Redis
        # Cluster, and the node's shutdown waited for the loop forever).
        while not (await asyncio.wait({task}, timeout=STOP_AGAIN_SECONDS))[0]:
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
