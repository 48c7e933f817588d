"""Where a process sits: its seat in the cluster, and the URL a bound socket answers at."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from dynamiq.cluster.board import Board
from dynamiq.config import Settings

__all__ = ["Seat", "own_seat", "url_of"]


@dataclass(frozen=True)
class Seat:
    """Where a process that gossips sits in the cluster: a node of one process
    (``own_seat``), or one worker of a node, made by its supervisor and kept
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


def own_seat(settings: Settings, sock: socket.socket) -> Seat | None:
    """Return the seat of a node of one process that gossips (its HTTP socket takes the
    peers' calls); None for a node alone."""
    if not settings.gossip:
        return None
    core, cluster = settings.core, settings.cluster
    host = cluster.address or core.httpaddress
    address, seeds = f"{host}:{core.port}", tuple(core.seeds())
    return Seat(core.name, sock, address, seeds, cluster.shared_secret(), quorum=True)


def url_of(sock: socket.socket, tls: bool = False) -> str:
    """Return the base URL of a bound socket (``https`` with ``tls``)."""
    host, port = sock.getsockname()[:2]
    scheme = "https" if tls else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
