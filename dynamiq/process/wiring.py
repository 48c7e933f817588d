"""The composition root: a node's parts built from Settings, and the order they run in.

Everything a node runs is started and stopped by the application's cleanup
contexts, in one order, whether the app is served by ``daemon.serve`` or by
a test. The node stands on its ground (``ground``: the store, the metrics,
the cluster's reach, the keys); what is built on it (``node``) runs as the
app's parts (``parts``), in the order ``PARTS`` gives. Sockets, signals and
the process's tuning are ``daemon``'s.
"""

from __future__ import annotations

import socket

from aiohttp import web

from dynamiq.api.app import build_app
from dynamiq.cluster.base import FatalHandler
from dynamiq.config import Settings
from dynamiq.core.clock import Clock, MonotonicClock
from dynamiq.process import node
from dynamiq.process.ground import Ground
from dynamiq.process.parts import PARTS, log_fatal
from dynamiq.process.seat import Seat, own_seat
from dynamiq.process.tls import Certificates
from dynamiq.storage.base import StorageBackend

__all__ = ["CERTIFICATES", "STORE", "create_app"]

STORE = web.AppKey("store", StorageBackend)  # the store the app owns (closed at cleanup)
CERTIFICATES = web.AppKey("certificates", Certificates)  # with [tls] only


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
    seat = seat or own_seat(settings, sock)
    ground = Ground.open(settings, sock, clock or MonotonicClock(), seat)
    built = node.build(ground)
    app = build_app(built.services(ground), settings.limits.maxbodybytes)
    app[STORE] = ground.store
    if ground.certificates is not None:
        app[CERTIFICATES] = ground.certificates
    for part in PARTS:
        part(app, ground, built, on_fatal or log_fatal)
    return app
