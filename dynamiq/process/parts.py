"""The parts a node runs, each started and stopped with the app: what it owns, in the
order it starts (aiohttp stops them in reverse).

A part is a function of the app, the node's ground and what was built on it;
``PARTS`` is their order. A new service of the node is a new part here (and
its construction in ``node.build``), not lines in ``wiring.create_app``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web

from dynamiq.api.console import sends_a_file
from dynamiq.api.context import SERVICES
from dynamiq.api.delivery import DEPARTURES
from dynamiq.api.front.connection import FRONT, Front
from dynamiq.api.v2.front import V2Front
from dynamiq.cluster.base import FatalHandler
from dynamiq.errors import DynamiqError
from dynamiq.process.contexts import owned, started, task, trim_memory_loop
from dynamiq.process.ground import Ground
from dynamiq.process.node import Built
from dynamiq.storage.factory import describe
from dynamiq.storage.version import claim_format

__all__ = ["PARTS", "Part", "log_fatal"]

log = logging.getLogger("dynamiq.daemon")

Part = Callable[[web.Application, Ground, Built, FatalHandler], None]


def run_store(app: web.Application, ground: Ground, built: Built, _: FatalHandler) -> None:
    """The store: closed last, its format claimed before a byte is read, its disk's room."""
    store, space, where = ground.store, ground.space, describe(ground.settings)
    app.cleanup_ctx.extend(
        [
            owned(None, store.close),  # exits last
            owned(lambda: claim_format(store, where), None),
            owned(space.check if space else None, None),
        ]
    )


def run_catalog(app: web.Application, ground: Ground, built: Built, _: FatalHandler) -> None:
    """The catalog and the keys read, and the counts and leases a kill -9 left."""
    keys, engine = ground.keys, built.engine
    app.cleanup_ctx.extend(
        [
            owned(engine.catalog.reload, None),
            owned(keys.reload if keys else None, None),
            owned(engine.queues.custody.replay, None),
        ]
    )


def run_cluster(app: web.Application, ground: Ground, built: Built, fatal: FatalHandler) -> None:
    """The peers' client, the membership and the cluster parts; at shutdown, the node
    stops serving first (long polls answer now; the others take this slice now)."""
    cluster, membership, client = built.cluster, ground.reach.membership, ground.reach.client

    async def stop_serving(_: web.Application) -> None:
        await built.node.stop_serving()

    app.on_shutdown.append(stop_serving)
    app.cleanup_ctx.extend(
        [
            owned(None, client.close if client else None),
            owned(lambda: membership.start(fatal), membership.stop),
            owned(started(cluster.start), cluster.close),
        ]
    )


def run_upkeep(app: web.Application, ground: Ground, built: Built, _: FatalHandler) -> None:
    """The background loops: redrives and replays, the janitor, spreads, sweeps, reports, memory."""
    engine, reporter, space = built.engine, built.reporter, ground.space
    app.cleanup_ctx.extend(
        [
            owned(engine.redriver.resume, engine.redriver.close),
            owned(engine.archives.resume, engine.archives.close),
            task(engine.janitor.janitor_loop),
            task(engine.spreader.spread_loop),
            task(engine.queues.sweep_loop),
            owned(None, reporter.close),  # after its loop: cleanups run last first
            task(reporter.reporter_loop),
            task(trim_memory_loop),
            *([task(space.watch_loop)] if space else []),
        ]
    )


def serve_front(app: web.Application, ground: Ground, built: Built, _: FatalHandler) -> None:
    """Serve v2's hot routes from the node's own front end (``core.front``); its
    requests are answered at shutdown after the node stopped serving."""
    if ground.settings.core.front != "on":
        return
    limits = ground.settings.limits
    front = Front(
        V2Front(app[SERVICES], app[DEPARTURES]).lookup,
        lambda head: not sends_a_file(head.method, head.path),  # sendfile wants its transport
        limits.idletimeout,
        limits.maxbodybytes,
        limits.shutdowntimeout,
    )
    app[FRONT] = front
    app.on_shutdown.append(front.on_shutdown)


def run_push(app: web.Application, ground: Ground, built: Built, _: FatalHandler) -> None:
    """Push subscriptions and their deliveries (after the catalog is read)."""
    app.cleanup_ctx.extend(
        [owned(built.webhooks.start, built.poster.close), task(built.pusher.pusher_loop)]
    )


PARTS: tuple[Part, ...] = (run_store, run_catalog, run_cluster, run_upkeep, serve_front, run_push)


def log_fatal(error: DynamiqError) -> None:
    """Say why the node cannot go on (when nobody else is told)."""
    log.error("this node cannot go on: %s", error)
