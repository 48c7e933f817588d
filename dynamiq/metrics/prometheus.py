"""Prometheus sink: the same figures as StatsD, served at ``/metrics`` in text format.

Per-queue series are bounded: the first ``max_queue_series`` queues a node
reports get series of their own, every later one is added into the series
labelled ``*`` (its counters and its depth and leases summed), so a node with
a hundred thousand queues does not expose millions of series.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from dynamiq.metrics.base import LIFECYCLE_EVENTS, TOPIC_EVENTS

__all__ = ["CONTENT_TYPE", "OTHER_QUEUES", "PrometheusMetrics", "summed"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


M = TypeVar("M", Counter, Gauge, Histogram)
OTHER_QUEUES = "*"  # the label of every queue past the cap, summed (no queue's name)
MAX_QUEUE_SERIES = 1000


# Per topic event: its series' name and help.
TOPIC_SERIES: dict[str, tuple[str, str]] = {
    "published": ("dynamiq_topic_messages_published", "Messages published"),
    "delivered": (
        "dynamiq_topic_notifications_delivered",
        "Copies stored in subscribed queues, and pushes their endpoints took",
    ),
    "failed": ("dynamiq_topic_notifications_failed", "Pushes that failed (every attempt)"),
    "redriven_to_dlq": (
        "dynamiq_topic_notifications_redriven_to_dlq",
        "Pushes given up and moved to their subscription's dead-letter queue",
    ),
    "unrouted": (
        "dynamiq_topic_messages_unrouted",
        "Messages published to a topic that no subscription took",
    ),
    **{
        event: (
            f"dynamiq_topic_notifications_{event}",
            f"Copies a filter kept from its queue ({event[13:].replace('_', ' ')})",
        )
        for event in TOPIC_EVENTS
        if event.startswith("filtered_out_")
    },
}
HTTP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5)
PUSH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 15)


class _Cap:
    """Which queues have series of their own: the first ``most`` reported."""

    __slots__ = ("_most", "_own")

    def __init__(self, most: int) -> None:
        self._most = most
        self._own: set[str] = set()

    def label(self, queue: str) -> str:
        """The label ``queue``'s figures go under."""
        if queue in self._own:
            return queue
        if len(self._own) < self._most:
            self._own.add(queue)
            return queue
        return OTHER_QUEUES


class _Series(Generic[M]):
    """A labelled metric's series, each found once by its label values (``labels``
    takes a lock and makes a tuple of strings on every call)."""

    __slots__ = ("_found", "_metric")

    def __init__(self, metric: M) -> None:
        self._metric: M = metric
        self._found: dict[tuple[object, ...], M] = {}

    def __call__(self, *values: object) -> M:
        series = self._found.get(values)
        if series is None:
            series = self._found[values] = self._metric.labels(*map(str, values))
        return series


class PrometheusMetrics:
    """Counters, gauges and a latency histogram in a registry of this node's own."""

    def __init__(self, max_queue_series: int = MAX_QUEUE_SERIES) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._cap = _Cap(max_queue_series)
        # Past the cap: each queue's last depth and leases, and their sums.
        self._levels: dict[str, tuple[int, int]] = {}
        self._summed = [0, 0]

        def counted(name: str, doc: str, label: str = "queue") -> _Series[Counter]:
            return _Series(Counter(name, doc, [label], registry=r))

        def gauged(name: str, doc: str, label: str = "queue") -> _Series[Gauge]:
            return _Series(Gauge(name, doc, [label], registry=r))

        self._sent = counted("dynamiq_messages_sent", "Messages stored")
        self._received = counted("dynamiq_messages_received", "Messages delivered")
        self._deleted = counted("dynamiq_messages_deleted", "Messages deleted")
        self._redelivered = counted("dynamiq_messages_redelivered", "Messages delivered again")
        self._lifecycle = {
            event: counted(f"dynamiq_messages_{event}", f"Messages {event.replace('_', ' ')}")
            for event in LIFECYCLE_EVENTS
        }
        self._topic = {
            event: counted(name, doc, label="topic") for event, (name, doc) in TOPIC_SERIES.items()
        }
        self._depth = gauged("dynamiq_queue_depth", "Messages stored in the queue")
        self._approximate = gauged(
            "dynamiq_queue_approximate_depth", "Depth as estimated by the node"
        )
        self._in_flight = gauged("dynamiq_queue_in_flight", "Messages leased and not deleted")
        self._fill = gauged("dynamiq_queue_fill_percent", "Fill of the last receive")

        def timed(
            name: str, doc: str, labels: list[str], buckets: Sequence[float]
        ) -> _Series[Histogram]:
            return _Series(Histogram(name, doc, labels, registry=r, buckets=buckets))

        self._latency = timed(
            "dynamiq_http_request_seconds",
            "HTTP requests by route",
            ["route", "method", "status"],
            HTTP_BUCKETS,
        )
        self._errors = counted("dynamiq_http_errors", "Error answers by code", label="code")
        self._push_latency = timed(
            "dynamiq_push_delivery_seconds",
            "Attempts to deliver to a push subscription's endpoint, by subscription id",
            ["subscription"],
            PUSH_BUCKETS,
        )
        self._push_in_flight = gauged(
            "dynamiq_push_in_flight",
            "Deliveries to a push subscription's endpoint under way",
            label="subscription",
        )
        self._members = Gauge("dynamiq_cluster_size", "Live nodes", registry=r)
        self._commit = Gauge(
            "dynamiq_store_commit_seconds", "Mean commit latency lately", registry=r
        )

    def sent(self, counts: Mapping[str, int]) -> None:
        """Count stored messages (the queues past the cap summed first)."""
        label, series = self._cap.label, self._sent
        summed: dict[str, int] = {}
        for queue, count in counts.items():
            key = label(queue)
            summed[key] = summed.get(key, 0) + count
        for key, count in summed.items():
            series(key).inc(count)

    def received(self, queue: str, count: int, asked: int) -> None:
        """Count delivered messages and set the fill (a queue past the cap has none)."""
        label = self._cap.label(queue)
        if count:
            self._received(label).inc(count)
        if label != OTHER_QUEUES:
            self._fill(label).set(math.floor(count * 100 / max(asked, 1)))

    def deleted(self, queue: str, count: int) -> None:
        """Count deleted messages."""
        self._deleted(self._cap.label(queue)).inc(count)

    def redelivered(self, queue: str, count: int) -> None:
        """Count redeliveries."""
        self._redelivered(self._cap.label(queue)).inc(count)

    def lifecycle(self, queue: str, event: str, count: int) -> None:
        """Count dead-lettered, expired and redriven messages."""
        self._lifecycle[event](self._cap.label(queue)).inc(count)

    def topic_event(self, topic: str, event: str, count: int) -> None:
        """Count a topic's published, delivered, unrouted and filtered-out messages."""
        self._topic[event](topic).inc(count)

    def queue_level(self, queue: str, depth: int, in_flight: int) -> None:
        """Set depth and in-flight (past the cap, into the sums)."""
        label = self._cap.label(queue)
        if label == OTHER_QUEUES:
            was = self._levels.pop(queue, (0, 0))
            if depth or in_flight:  # an empty queue past the cap holds nothing here
                self._levels[queue] = (depth, in_flight)
            self._summed[0] += depth - was[0]
            self._summed[1] += in_flight - was[1]
            depth, in_flight = self._summed
        self._depth(label).set(depth)
        self._approximate(label).set(depth)  # one node: the estimate is exact
        self._in_flight(label).set(in_flight)

    def push_attempt(self, subscription: str, seconds: float, in_flight: int) -> None:
        """Observe a delivery attempt; set the subscription's deliveries in flight."""
        self._push_latency(subscription).observe(seconds)
        self._push_in_flight(subscription).set(in_flight)

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Observe a request."""
        self._latency(route, method, status).observe(seconds)

    def error(self, code: str) -> None:
        """Count an error answer."""
        self._errors(code).inc()

    def node_level(self, members: int, commit_seconds: float | None) -> None:
        """Set cluster size and commit latency."""
        self._members.set(members)
        if commit_seconds is not None:
            self._commit.set(commit_seconds)

    def flush(self) -> None:
        """Nothing to send: Prometheus pulls."""

    def close(self) -> None:
        """Nothing held: the registry is read until the process ends."""

    def render(self) -> bytes:
        """Return the registry in the Prometheus text format."""
        return generate_latest(self.registry)


# A family's kind, and its samples by series (``name{labels}``) in their order.
_Family = tuple[str, dict[str, float]]
_SUMMED = ("counter", "histogram")


def summed(own: bytes, others: Sequence[bytes]) -> bytes:
    """Return one node's exposition from its workers': ``own`` with the other workers'
    counters and histograms added in.

    Gauges are ``own``'s: what they measure (depths, leases in flight, the
    cluster's size) is read for the whole node or the whole cluster already;
    but a series first counted by another worker gets that worker's
    ``_created`` time.
    """
    headers: dict[str, list[str]] = {}
    families = _parse(own, headers)
    for text in others:
        for name, (kind, samples) in _parse(text, headers).items():
            created = name.endswith("_created")
            if kind not in _SUMMED and not created:
                continue
            mine = families.setdefault(name, (kind, {}))[1]
            for series, value in samples.items():
                if created:
                    mine.setdefault(series, value)
                else:
                    mine[series] = mine.get(series, 0.0) + value
    lines: list[str] = []
    for name, (_, samples) in families.items():
        lines += headers[name]
        lines += [f"{series} {value!r}" for series, value in samples.items()]
    return ("\n".join(lines) + "\n").encode()


def _parse(text: bytes, headers: dict[str, list[str]]) -> dict[str, _Family]:
    """Read an exposition's families; their ``# HELP``/``# TYPE`` lines go to ``headers``."""
    families: dict[str, _Family] = {}
    samples: dict[str, float] = {}
    for line in text.decode().splitlines():
        if line.startswith("# "):
            _, word, name, rest = [*line.split(" ", 3), ""][:4]
            headers.setdefault(name, [])
            if line not in headers[name]:
                headers[name].append(line)
            if word == "TYPE":
                samples = {}
                families[name] = (rest.strip(), samples)
        elif line:
            series, _, value = line.rpartition(" ")
            samples[series] = float(value)
    return families
