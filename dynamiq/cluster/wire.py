"""What nodes say to each other over HTTP (msgpack bodies under ``/internal/v1``).

Every internal request carries ``X-Dynamiq-Peer``, a token derived from the
cluster secret, so that only members can move leases or leave for another.
"""

from __future__ import annotations

import hashlib
import hmac

import msgspec

from dynamiq.models import HeldLease, LocalQueueStats, Message

__all__ = [
    "PEER_HEADER",
    "Handoff",
    "HandoffLeases",
    "Heartbeat",
    "Leave",
    "PeerCounts",
    "PeerIds",
    "PeerMessages",
    "PeerReceive",
    "PeerStats",
    "PeerVisibility",
    "QueueNames",
    "peer_token",
]

PEER_HEADER = "X-Dynamiq-Peer"


def peer_token(secret: str) -> str:
    """Return the token members show each other (never the secret itself)."""
    return hmac.new(secret.encode(), b"dynamiq peer v1", hashlib.sha256).hexdigest()


class PeerReceive(msgspec.Struct):
    """Lease up to ``max_messages`` from the receiving node's own slice, without waiting."""

    max_messages: int
    visibility_timeout: float | None = None


class PeerMessages(msgspec.Struct):
    """Leased messages, with what they carry beside the body."""

    messages: list[Message]


class PeerVisibility(msgspec.Struct):
    """Change the leases of ``ids`` (held by the receiving node) to ``seconds`` from now."""

    ids: list[int]
    seconds: float


class PeerIds(msgspec.Struct):
    """Ids the request applied to."""

    ids: list[int]


class PeerCounts(msgspec.Struct):
    """Per id asked, the receive count it was last delivered with here (0: not here)."""

    counts: list[int]


class Handoff(msgspec.Struct):
    """``name`` now owns ``[lo, hi]``: stop serving it and hand over its live leases,
    once the members ``gone`` from its view have been silent here for the fence."""

    lo: int
    hi: int
    name: str
    gone: list[str] = []


class Heartbeat(msgspec.Struct):
    """Member ``name`` is here: the answer completes its round trip."""

    name: str


class HandoffLeases(msgspec.Struct):
    """Live leases in the range handed over, per queue."""

    leases: dict[str, list[HeldLease]]


class Leave(msgspec.Struct):
    """Member ``name`` (process ``boot``) is leaving the cluster now."""

    name: str
    boot: str


class QueueNames(msgspec.Struct):
    """The queues a stats request asks about."""

    queues: list[str]


class PeerStats(msgspec.Struct):
    """Per queue, what only the answering node knows."""

    queues: dict[str, LocalQueueStats]
