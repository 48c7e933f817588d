"""What every part of a node stands on: its settings, clock and seat, the store, the
metrics, its reach of the cluster, and the keys.

Opened once by ``wiring.create_app``; the parts (``parts``) take it as it is.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass

from dynamiq.access.keys import KeyRing
from dynamiq.cluster.base import Member, Membership, StaticMembership
from dynamiq.cluster.peers import PeerClient
from dynamiq.cluster.swim import SwimMembership
from dynamiq.cluster.wire import PeerSigner
from dynamiq.config import LOOPBACK, Settings, StatsSettings
from dynamiq.core.clock import Clock
from dynamiq.metrics.base import Metrics, MetricsFanout
from dynamiq.metrics.prometheus import PrometheusMetrics
from dynamiq.process.seat import Seat, url_of
from dynamiq.process.tls import Certificates
from dynamiq.service.reach import Reach
from dynamiq.storage.base import StorageBackend
from dynamiq.storage.diskspace import FreeSpace
from dynamiq.storage.factory import open_store

__all__ = ["Ground"]

log = logging.getLogger("dynamiq.daemon")


@dataclass(frozen=True)
class Ground:
    """A node's ground: built before any part, shared by all of them."""

    settings: Settings
    sock: socket.socket  # the HTTP port's
    clock: Clock
    seat: Seat | None  # None for a node alone
    certificates: Certificates | None  # with [tls] only
    store: StorageBackend
    space: FreeSpace | None  # the room on the embedded store's disk
    metrics: Metrics
    prometheus: PrometheusMetrics  # ``/metrics`` is always served
    signer: PeerSigner | None  # signs and checks members' calls (with a seat)
    reach: Reach
    keys: KeyRing | None  # None where keys are off

    @classmethod
    def open(
        cls, settings: Settings, sock: socket.socket, clock: Clock, seat: Seat | None
    ) -> Ground:
        """Open the store and the metrics, and reach the cluster from ``seat``."""
        certificates = Certificates(settings.tls) if settings.tls.enabled else None
        store, space = open_store(settings)
        metrics, prometheus = _open_metrics(settings.stats)
        signer = PeerSigner(seat.secret) if seat else None
        reach = _reach(settings, sock, seat, signer, certificates)
        keys = _keys(settings, store, clock, reach)
        return cls(
            settings, sock, clock, seat, certificates, store, space, metrics, prometheus,
            signer, reach, keys,
        )  # fmt: skip

    @property
    def url(self) -> str:
        """This node's own URL, as the HTTP port serves it."""
        return url_of(self.sock, self.certificates is not None)


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
    membership = _open_membership(settings, url_of(called_at, certificates is not None), seat)
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


def _open_metrics(settings: StatsSettings) -> tuple[Metrics, PrometheusMetrics]:
    """Return the configured sinks and the Prometheus one (``/metrics`` is always served)."""
    prometheus = PrometheusMetrics(settings.maxqueueseries)
    if settings.type != "statsd":
        return prometheus, prometheus
    from dynamiq.metrics.statsd import StatsdMetrics

    host, _, port = settings.address.rpartition(":")
    return MetricsFanout([StatsdMetrics(host, int(port), settings.prefix), prometheus]), prometheus


def _open_membership(settings: Settings, http: str, seat: Seat | None) -> Membership:
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
