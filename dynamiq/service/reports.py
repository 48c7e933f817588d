"""What a node reports about its queues and its cluster: cluster-wide stats and the members.

Structs rather than dataclasses: the v2 API sends them as they are, and its
OpenAPI document is generated from them.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec

from dynamiq.cluster.base import Member, Membership, MemberState
from dynamiq.core.delivery.state import QueueStats
from dynamiq.core.push.documents import PUSH_PREFIX
from dynamiq.core.routing.filters import FilterScope
from dynamiq.core.routing.subscriptions import ARCHIVE_PREFIX, Subscription, Topic
from dynamiq.keyspace import WORKER_MARK, KeyRange, node_of
from dynamiq.models import LocalQueueStats, QueueSettings

__all__ = [
    "INTERNAL",
    "MemberStatus",
    "NodeStats",
    "PushView",
    "QueueStatsDetail",
    "QueueView",
    "Rates",
    "RedriveView",
    "ReplayView",
    "Status",
    "Subscribers",
    "SubscriptionView",
    "Totals",
    "WorkerStatus",
    "cluster_status",
    "live_nodes",
    "node_slice",
    "queue_detail",
    "span",
    "totals",
    "totals_of",
]


INTERNAL = (PUSH_PREFIX, ARCHIVE_PREFIX)
"""How the node's own queues' names start (a push subscription's, a topic's archive):
no client names them, no listing shows them."""


class QueueView(msgspec.Struct, frozen=True):
    """A queue as described to users: its settings and what this node sees of it, and
    when it will be deleted unless used (epoch ms; None: it does not auto-delete)."""

    name: str
    settings: QueueSettings
    stats: QueueStats
    expires_at_ms: int | None = None


class PushView(msgspec.Struct, frozen=True):
    """Where a push subscription delivers (a webhook): its id, ``protocol`` and ``url``,
    whether the endpoint confirmed it (``state`` pending or confirmed), raw bodies, its
    own delivery policy (SNS's JSON) and dead-letter queue."""

    id: str
    protocol: str
    url: str
    state: Literal["pending", "confirmed"]
    raw: bool = False
    delivery_policy: str | None = None
    dead_letter_queue: str | None = None


class SubscriptionView(msgspec.Struct, frozen=True):
    """A subscription to a topic: the queue it fills (a push subscription's is internal),
    the routing-key pattern and the filter policy it takes messages by (none: every
    message), whether it takes them as SNS notifications (``envelope``), and for a push
    subscription where it delivers them."""

    queue: str
    pattern: str | None = None
    filter: dict[str, Any] | None = None
    envelope: bool = False
    filter_scope: FilterScope = "attributes"
    push: PushView | None = None

    @classmethod
    def of(cls, subscription: Subscription) -> SubscriptionView:
        """Return the view of a subscription the catalog holds."""
        policy = subscription.filter
        return cls(
            subscription.queue,
            subscription.pattern,
            None if policy is None else policy.spec,
            subscription.envelope,
            "attributes" if policy is None else policy.scope,
            _push_view(subscription),
        )


class Subscribers:
    """A topic's subscriptions as they stand (after a change, say), shown only as far
    as asked: the queues' names, or a page of views. A wide topic's subscribe costs
    its one subscription, not a view of every other."""

    def __init__(self, topic: Topic) -> None:
        self._topic = topic

    def queues(self) -> list[str]:
        """The subscribed queues, sorted (an archive's left out)."""
        return [q for q in self._topic.queues() if not q.startswith(ARCHIVE_PREFIX)]

    def get(self, queue: str) -> SubscriptionView | None:
        """The subscription of ``queue`` (None: it has none, or it is an archive's)."""
        found = self._topic.subscriptions.get(queue)
        if found is None or queue.startswith(ARCHIVE_PREFIX):
            return None
        return SubscriptionView.of(found)

    def webhook(self, subscription: str) -> SubscriptionView | None:
        """The push subscription whose id is ``subscription`` (None: there is none)."""
        found = self.get(PUSH_PREFIX + subscription)
        return found if found is not None and found.push is not None else None

    def page(
        self, after: str = "", limit: int | None = None, pushes: bool = True
    ) -> tuple[list[SubscriptionView], str | None]:
        """Up to ``limit`` (None: every) subscriptions after the queue ``after``, sorted
        by queue (push subscriptions too, with ``pushes``); and the last one's queue
        when more follow."""
        out: list[SubscriptionView] = []
        for subscription in self._topic.listed(after):
            if subscription.endpoint is not None and not pushes:
                continue
            if subscription.queue.startswith(ARCHIVE_PREFIX):
                continue
            if len(out) == limit:
                return out, out[-1].queue
            out.append(SubscriptionView.of(subscription))
        return out, None


def _push_view(subscription: Subscription) -> PushView | None:
    endpoint = subscription.endpoint
    if endpoint is None:
        return None
    return PushView(
        subscription.queue.removeprefix(PUSH_PREFIX),
        endpoint.protocol,
        endpoint.url,
        "confirmed" if endpoint.confirmed else "pending",
        endpoint.raw,
        endpoint.delivery_policy,
        endpoint.dead_letter,
    )


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


class ReplayView(msgspec.Struct, frozen=True):
    """A replay of a FIFO topic's archive into a subscription: the policy it was asked
    by (SNS's JSON), its state, and whether it passed any of the archive yet."""

    policy: str
    state: Literal["running", "done", "failed", "cancelled"]
    started: bool


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
    """Sums over every queue (``scope`` "all"), or over the page's queues ("page": a
    store that counts no messages over every queue, Riak, or a Redis store written
    by a release that did not, see ``storage.redis.totals``). Over every
    queue, ``depth`` counts every stored message (a webhook's deliveries waiting
    included) and ``visible`` is what no lease holds: delayed messages in it."""

    visible: int
    in_flight: int
    depth: int
    rates: Rates
    scope: Literal["all", "page"] = "page"


class NodeStats(msgspec.Struct, omit_defaults=True):
    """A page of queues' stats (every queue when they fit in one) and their sums;
    ``queue_count`` says how many queues there are, ``next`` the name to ask after
    for the next page (left out on the last)."""

    node: str
    members: int
    queues: list[QueueStatsDetail]
    totals: Totals
    queue_count: int
    next: str | None = None


class MemberStatus(msgspec.Struct):
    """A node of the cluster, its gossip state (online, suspect, offline, left), its
    slice and how many of its worker processes are live.

    The slice is the ids it owns in the live view (decimal strings, inclusive);
    empty for a node that is not live. A node served by several workers is
    shown once: online while one of them is, its slice theirs together.
    """

    name: str
    http: str
    state: str
    slice: list[str]
    workers: int = 1


class WorkerStatus(msgspec.Struct):
    """One worker process of this node: its member name, state, slice and what it
    serves now."""

    name: str
    http: str
    state: str
    slice: list[str]
    serving: list[str]


class Status(msgspec.Struct):
    """This node, the ids it serves now, the nodes it heard of, and its workers.

    ``serving`` is empty while the node (one of its workers) waits for its
    slice to be handed over. ``workers`` is empty for a node of one process.
    """

    node: str
    members: list[MemberStatus]
    serving: list[str]
    workers: list[WorkerStatus] = []


def queue_detail(name: str, own: QueueStats, peers: LocalQueueStats) -> QueueStatsDetail:
    """Return a queue's stats with the peers' leases and rates added to this node's."""
    both = own.here + peers
    return QueueStatsDetail(
        name,
        max(0, own.depth - both.in_flight - own.delayed),
        both.in_flight,
        own.depth,
        own.oldest_age,
        Rates(both.publish, both.receive, both.delete),
        own.partitions,
        own.delayed,
        both.dead_lettered,
        both.expired,
        both.redriven,
    )


def totals_of(depth: int, every: LocalQueueStats) -> Totals:
    """Return the sums over every queue: ``depth`` messages stored, ``every`` member's
    leases and rates summed over every queue."""
    in_flight = every.in_flight
    rates = Rates(every.publish, every.receive, every.delete)
    return Totals(max(0, depth - in_flight), in_flight, depth, rates, "all")


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


# Gossip states from the best to the worst: a node is in the best of its workers'.
STATES = ("online", "suspect", "offline", "left")


def cluster_status(membership: Membership, serving: Mapping[str, KeyRange | None]) -> Status:
    """Return every node heard of with its state and slice, and what this node serves
    (``serving``: per live worker of this node, this process included)."""
    live = {m.name for m in membership.members()}
    by_node: dict[str, list[MemberState]] = {}
    for state in membership.states():
        by_node.setdefault(node_of(state.member.name), []).append(state)

    def slices(states: list[MemberState]) -> list[KeyRange | None]:
        return [membership.slice_of(s.member.name) for s in states if _live(s, live)]

    members = [
        MemberStatus(
            node,
            states[0].member.http,
            min((s.state for s in states), key=_rank),
            _texts(span(slices(states))),
            sum(_live(s, live) for s in states),
        )
        for node, states in by_node.items()
    ]
    local = membership.local().name
    mine = by_node.get(node_of(local), [])
    workers = [
        WorkerStatus(
            s.member.name,
            s.member.http,
            s.state,
            _texts(membership.slice_of(s.member.name) if _live(s, live) else None),
            _texts(serving.get(s.member.name)),
        )
        for s in mine
        if WORKER_MARK in s.member.name
    ]
    served = [serving.get(s.member.name) for s in mine if _live(s, live)]
    return Status(node_of(local), members, _texts(span(served)), workers)


def live_nodes(membership: Membership) -> list[Member]:
    """Return one live member per live node (its first worker), sorted by name."""
    firsts: dict[str, Member] = {}
    for member in membership.members():
        firsts.setdefault(node_of(member.name), member)
    return list(firsts.values())


def node_slice(membership: Membership) -> KeyRange:
    """Return the ids this node owns in the live view: its live workers' slices (they
    are neighbours in the view: their names share the node's)."""
    local = membership.local().name
    mine = [m.name for m in membership.members() if node_of(m.name) == node_of(local)]
    return span([membership.slice_of(name) for name in mine]) or membership.slice_of(local)


def span(ranges: Sequence[KeyRange | None]) -> KeyRange | None:
    """Return the one range ``ranges`` make together; None when one is None, there is
    none, or they leave a gap."""
    if not ranges or None in ranges:
        return None
    ordered = sorted(r for r in ranges if r is not None)
    for (_, hi), (lo, _) in itertools.pairwise(ordered):
        if lo != hi + 1:
            return None
    return ordered[0][0], ordered[-1][1]


def _live(state: MemberState, live: set[str]) -> bool:
    return state.alive and state.member.name in live


def _rank(state: str) -> int:
    return STATES.index(state) if state in STATES else len(STATES)


def _texts(bounds: KeyRange | None) -> list[str]:
    return [str(bounds[0]), str(bounds[1])] if bounds else []
