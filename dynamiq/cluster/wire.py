"""What nodes say to each other over HTTP (msgpack bodies under ``/internal/v1``).

Every internal request carries ``X-Dynamiq-Peer``: the time it was made, a
nonce and an HMAC of both, its path and its body under a key derived from
the cluster secret. Only members can move leases or leave for another, and
a request seen on the wire cannot be sent again (the nonce is remembered for
as long as the time is accepted) nor changed.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable

import msgspec

from dynamiq.models import HeldLease, LocalQueueStats, Message

__all__ = [
    "PEER_HEADER",
    "PROTOCOL_HEADER",
    "Handoff",
    "HandoffLeases",
    "Heartbeat",
    "Leave",
    "News",
    "PeerCounts",
    "PeerIds",
    "PeerMessages",
    "PeerMetrics",
    "PeerReceive",
    "PeerServing",
    "PeerSigner",
    "PeerStats",
    "PeerVisibility",
    "QueueNames",
]

PEER_HEADER = "X-Dynamiq-Peer"
PROTOCOL_HEADER = "X-Dynamiq-Protocol"  # the cluster protocol the caller speaks


# How far a request's time may be from the receiver's clock (nodes' clocks are
# kept by NTP; on one machine they are the same clock).
SIGNATURE_SECONDS = 30.0


class PeerSigner:
    """Signs this node's internal requests and checks its peers' (one cluster secret).

    ``now`` is the wall clock (seconds since the epoch): the nodes compare
    their clocks through it.
    """

    def __init__(
        self,
        secret: str,
        now: Callable[[], float] = time.time,
        window: float = SIGNATURE_SECONDS,
    ) -> None:
        self._key = hmac.new(secret.encode(), b"dynamiq peer v2", hashlib.sha256).digest()
        self._now = now
        self._window = window
        # Nonces accepted in this window and the one before: a replay within the
        # time a request is accepted finds its nonce in one of them.
        self._seen: set[str] = set()
        self._before: set[str] = set()
        self._turned = now()

    def sign(self, path: str, body: bytes) -> str:
        """Return the header value for a request to ``path`` with ``body``."""
        stamp, nonce = f"{self._now():.3f}", secrets.token_hex(12)
        return f"{stamp} {nonce} {self._mac(stamp, nonce, path, body)}"

    def verify(self, header: str, path: str, body: bytes) -> str | None:
        """Return why the request is refused, or None when a member made it just now."""
        stamp, nonce, mac = [*header.split(" ", 2), "", ""][:3]
        expected = self._mac(stamp, nonce, path, body).encode()
        if not hmac.compare_digest(mac.encode("utf-8", "replace"), expected):
            return "internal routes are for cluster members"
        now = self._now()
        if abs(now - float(stamp)) > self._window:
            return "the request is too old, or this node's clock is far from the sender's"
        if now - self._turned > self._window:
            self._before, self._seen, self._turned = self._seen, set(), now
        if nonce in self._seen or nonce in self._before:
            return "the request was sent before"
        self._seen.add(nonce)
        return None

    def _mac(self, stamp: str, nonce: str, path: str, body: bytes) -> str:
        signed = hmac.new(self._key, f"{stamp}\n{nonce}\n{path}\n".encode(), hashlib.sha256)
        signed.update(body)
        return signed.hexdigest()


class PeerReceive(msgspec.Struct):
    """Lease up to ``max_messages`` from the receiving node's own slice, without waiting."""

    max_messages: int
    visibility_timeout: float | None = None
    # The asking member, when its receive waits: told of the next messages stored
    # here (``News``) if this ask finds none.
    waiter: str = ""


class News(msgspec.Struct):
    """The member ``name`` stored messages of the queue in its own slice."""

    name: str


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


class CatalogChange(msgspec.Struct):
    """The queues and topics a catalog change wrote: read them again (protocol 3). Of
    the topics, those in ``partial`` changed only in the ``subscriptions`` named
    (``topic/queue``): read those alone (a process that knows no such fields reads
    each topic again whole)."""

    queues: list[str]
    topics: list[str]
    partial: list[str] = msgspec.field(default_factory=list)
    subscriptions: list[str] = msgspec.field(default_factory=list)


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


class PeerServing(msgspec.Struct):
    """The ids a member serves now: ``[lo, hi]``, empty while it waits for its slice."""

    serving: list[int]


class PeerMetrics(msgspec.Struct):
    """A member's own metrics in the Prometheus text format (a node's worker asks)."""

    text: bytes
