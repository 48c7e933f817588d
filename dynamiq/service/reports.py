"""What a node reports about its queues and its cluster: cluster-wide stats and the members.

Structs rather than dataclasses: the v2 API sends them as they are, and its
OpenAPI document is generated from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from dynamiq.cluster.base import Membership
from dynamiq.core.state import QueueStats
from dynamiq.keyspace import KeyRange
from dynamiq.models import LocalQueueStats, QueueSettings

__all__ = [
    "MemberStatus",
    "NodeStats",
    "QueueStatsDetail",
    "QueueView",
    "Rates",
    "RedriveView",
    "Status",
    "Totals",
    "cluster_status",
    "queue_detail",
    "totals",
]


class QueueView(msgspec.Struct, frozen=True):
    """A queue as described to users: its settings and what this node sees of it, and
    when it will be deleted unless used (epoch ms; None: it does not auto-delete)."""

    name: str
    settings: QueueSettings
    stats: QueueStats
    expires_at_ms: int | None = None


class RedriveView(msgspec.Struct):
    """A redrive of a dead-letter queue: its state, what it moved, what is left there.

    ``to`` null sends each message back to its source queue; ``skipped``
    counts messages left in place because their source queue is gone.
    """

    task: str
    state: Literal["running", "done", "cancelled", "failed"]
    moved: int
    remaining: int
    to: str | None
    skipped: int
    max_per_second: float | None
    error: str | None = None
    started_ms: int = 0


class Rates(msgspec.Struct):
    """Messages per second over the last 10 seconds."""

    publish: float
    receive: float
    delete: float


class QueueStatsDetail(msgspec.Struct):
    """A queue's contents and movement.

    ``oldest_age_seconds`` is the age of the oldest message due (null when
    none is); ``delayed`` counts messages not due yet (up to 1,000 per id
    stripe); the ``_total`` counts are summed over the live nodes since each
    started.
    """

    queue: str
    visible: int
    in_flight: int
    depth: int
    oldest_age_seconds: float | None
    rates: Rates
    partitions: int
    delayed: int
    dead_lettered_total: int
    expired_total: int
    redriven_total: int


class Totals(msgspec.Struct):
    """Sums over every queue."""

    visible: int
    in_flight: int
    depth: int
    rates: Rates


class NodeStats(msgspec.Struct):
    """Every queue's stats and their sums."""

    node: str
    members: int
    queues: list[QueueStatsDetail]
    totals: Totals


class MemberStatus(msgspec.Struct):
    """A cluster member, its gossip state (online, suspect, offline, left) and its slice.

    The slice is the ids it owns in the live view (decimal strings, inclusive);
    empty for a member that is not live.
    """

    name: str
    http: str
    state: str
    slice: list[str]


class Status(msgspec.Struct):
    """This node, the ids it serves now, and the members it heard of.

    ``serving`` is empty while the node waits for its slice to be handed over.
    """

    node: str
    members: list[MemberStatus]
    serving: list[str]


def queue_detail(name: str, own: QueueStats, peers: LocalQueueStats) -> QueueStatsDetail:
    """Return a queue's stats with the peers' leases and rates added to this node's."""
    in_flight = own.in_flight + peers.in_flight
    rates = Rates(
        own.publish_rate + peers.publish,
        own.receive_rate + peers.receive,
        own.delete_rate + peers.delete,
    )
    visible = max(0, own.depth - in_flight - own.delayed)
    return QueueStatsDetail(
        name,
        visible,
        in_flight,
        own.depth,
        own.oldest_age,
        rates,
        own.partitions,
        own.delayed,
        own.dead_lettered + peers.dead_lettered,
        own.expired + peers.expired,
        own.redriven + peers.redriven,
    )


def totals(queues: Sequence[QueueStatsDetail]) -> Totals:
    """Return the sums over ``queues``."""
    return Totals(
        visible=sum(q.visible for q in queues),
        in_flight=sum(q.in_flight for q in queues),
        depth=sum(q.depth for q in queues),
        rates=Rates(
            publish=sum(q.rates.publish for q in queues),
            receive=sum(q.rates.receive for q in queues),
            delete=sum(q.rates.delete for q in queues),
        ),
    )


def cluster_status(membership: Membership, serving: KeyRange | None) -> Status:
    """Return every member heard of with its state and slice, and what this node serves."""
    live = {m.name for m in membership.members()}

    def member(state: str, name: str, http: str) -> MemberStatus:
        if state in ("online", "suspect") and name in live:
            return MemberStatus(name, http, state, _texts(membership.slice_of(name)))
        return MemberStatus(name, http, state, [])

    members = [member(s.state, s.member.name, s.member.http) for s in membership.states()]
    return Status(membership.local().name, members, _texts(serving))


def _texts(bounds: KeyRange | None) -> list[str]:
    return [str(bounds[0]), str(bounds[1])] if bounds else []
