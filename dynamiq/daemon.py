"""The composition root: build a node from Settings, serve it, stop it cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path

from aiohttp import web

from dynamiq.api.app import build_app
from dynamiq.api.context import SERVICES, Services
from dynamiq.cluster.base import Member, Membership, StaticMembership
from dynamiq.cluster.coordinator import Coordinator
from dynamiq.cluster.peers import PeerClient
from dynamiq.cluster.swim import SwimMembership, free_gossip_port
from dynamiq.cluster.wire import peer_token
from dynamiq.config import Settings, StatsSettings, StorageSettings
from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import Clock, MonotonicClock
from dynamiq.core.janitor import Janitor
from dynamiq.core.queues import QueueService
from dynamiq.core.reporter import Reporter
from dynamiq.core.topics import TopicService
from dynamiq.errors import DynamiqError
from dynamiq.metrics.base import Metrics, MetricsFanout
from dynamiq.metrics.prometheus import PrometheusMetrics
from dynamiq.storage.base import StorageBackend

__all__ = ["create_app", "open_store", "serve"]

log = logging.getLogger("dynamiq.daemon")


def open_store(
    settings: StorageSettings, pool_size: int = 16, riak_nodes: list[str] | None = None
) -> StorageBackend:
    """Open the configured store (backends are imported only when chosen)."""
    if settings.backend == "riak":
        from dynamiq.storage.riak import RiakBackend

        return RiakBackend(riak_nodes or [], pool_size)
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


def open_membership(settings: Settings) -> StaticMembership | SwimMembership:
    """Return this node's view of the cluster: gossip when a secret is set, else alone."""
    core = settings.core
    if not settings.gossip:
        http = f"http://{core.httpaddress}:{core.httpport}"
        return StaticMembership(Member(core.name, core.httpaddress, http))
    host = settings.cluster.address or core.httpaddress
    port = core.port or free_gossip_port(host)
    return SwimMembership(
        core.name,
        f"{host}:{port}",
        core.seeds(),
        settings.cluster.shared_secret(),
        settings.cluster.pinginterval,
        settings.cluster.suspecttimeout,
    )


async def create_app(settings: Settings, clock: Clock | None = None) -> web.Application:
    """Open the store, load the catalog and return the node's application."""
    store = open_store(
        settings.storage, settings.core.backendconnectionpool, settings.core.riak_nodes()
    )
    catalog = Catalog(store)
    try:
        await catalog.reload()
    except BaseException:
        await store.close()
        raise
    metrics, prometheus = open_metrics(settings.stats)
    membership = open_membership(settings)
    # With gossip, nothing is served until the cluster hands this node its slice.
    keyspace = None if settings.gossip else membership.slice_of(settings.core.name)
    queues = QueueService(
        store, catalog, clock or MonotonicClock(), keyspace=keyspace, metrics=metrics
    )
    janitor = Janitor(catalog, queues, store, settings.core.syncconfiginterval / 1000)
    reporter = Reporter(
        queues,
        store,
        metrics,
        settings.stats.flushinterval,
        cluster_size=lambda: len(membership.members()),
    )
    token = peer_token(settings.cluster.shared_secret()) if settings.gossip else None
    coordinator = Coordinator(membership, queues, janitor, PeerClient(token) if token else None)
    catalog.on_change = coordinator.announce
    app = build_app(
        Services(
            store=store,
            catalog=catalog,
            queues=queues,
            topics=TopicService(catalog, queues),
            janitor=janitor,
            limits=settings.limits,
            membership=membership,
            coordinator=coordinator,
            metrics=metrics,
            render_metrics=prometheus.render,
            peer_token=token,
        )
    )

    async def on_shutdown(_: web.Application) -> None:
        queues.close()  # long polls return now instead of holding the shutdown
        await coordinator.leave()  # the others serve this slice now, not after a timeout

    async def store_ctx(_: web.Application) -> AsyncIterator[None]:
        yield
        await coordinator.close()
        if isinstance(membership, SwimMembership):
            await membership.stop()
        await store.close()

    app.on_shutdown.append(on_shutdown)
    app.cleanup_ctx.append(store_ctx)  # exits last: after the tasks below stop
    app.cleanup_ctx.append(_task_ctx(janitor.janitor_loop))
    app.cleanup_ctx.append(_task_ctx(reporter.reporter_loop))
    app.cleanup_ctx.append(_task_ctx(trim_memory_loop))
    return app


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


def _task_ctx(
    loop_fn: Callable[[], Coroutine[None, None, None]],
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def ctx(_: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(loop_fn())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return ctx


# The LMDB writer thread gives up the GIL inside every put and delete. With
# the default 5 ms switch interval, taking it back from a busy event loop can
# cost up to 5 ms each time (a commit of 100 deletes took 20-120 ms); at
# 100 us group commits stay short.
GIL_SWITCH_SECONDS = 0.0001


async def serve(settings: Settings, ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGTERM or SIGINT; a second signal exits at once."""
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
    app = await create_app(settings)
    runner = web.AppRunner(
        app, access_log=None, shutdown_timeout=settings.limits.shutdowntimeout, handle_signals=False
    )
    await runner.setup()
    sock = _listen(settings.core.httpaddress, settings.core.httpport)
    site = web.SockSite(runner, sock)
    await site.start()
    host, port = sock.getsockname()[:2]
    url = f"http://{host}:{port}"
    services = app[SERVICES]
    stop = asyncio.Event()
    failure: list[DynamiqError] = []

    def on_fatal(error: DynamiqError) -> None:
        log.error("stopping: %s", error)
        failure.append(error)
        stop.set()

    try:
        await _join(services.membership, url, on_fatal)
    except BaseException:
        await runner.cleanup()
        raise
    services.coordinator.start()
    _announce(settings, url)
    if ready:
        ready(url)
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            os._exit(1)
        log.info("stopping: finishing in-flight requests (signal again to exit at once)")
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
    log.info("stopped")
    if failure:
        raise failure[0]


async def _join(membership: Membership, url: str, on_fatal: Callable[[DynamiqError], None]) -> None:
    """Advertise this node's URL and, with gossip, join the cluster."""
    if isinstance(membership, StaticMembership):
        membership.advertise(url)
    elif isinstance(membership, SwimMembership):
        membership.advertise(url)
        await membership.start(on_fatal)


def _announce(settings: Settings, url: str) -> None:
    log.info("node %s serving %s", settings.core.name, url)
    redis = settings.storage.backend == "redis"
    data = settings.storage.url if redis else Path(settings.storage.path).resolve()
    print(
        f"dynamiq: node {settings.core.name} serving {url}; "
        f"{settings.storage.backend} data in {data}",
        flush=True,
    )


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock
