"""Prometheus sink: the same figures as StatsD, served at ``/metrics`` in text format."""

from __future__ import annotations

import math
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from dynamiq.metrics.base import LIFECYCLE_EVENTS

__all__ = ["CONTENT_TYPE", "PrometheusMetrics", "summed"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class PrometheusMetrics:
    """Counters, gauges and a latency histogram in a registry of this node's own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._sent = Counter("dynamiq_messages_sent", "Messages stored", ["queue"], registry=r)
        self._received = Counter(
            "dynamiq_messages_received", "Messages delivered", ["queue"], registry=r
        )
        self._deleted = Counter(
            "dynamiq_messages_deleted", "Messages deleted", ["queue"], registry=r
        )
        self._redelivered = Counter(
            "dynamiq_messages_redelivered", "Messages delivered again", ["queue"], registry=r
        )
        self._lifecycle = {
            event: Counter(
                f"dynamiq_messages_{event}",
                f"Messages {event.replace('_', ' ')}",
                ["queue"],
                registry=r,
            )
            for event in LIFECYCLE_EVENTS
        }
        self._unrouted = Counter(
            "dynamiq_topic_messages_unrouted",
            "Messages published to a topic that no subscription took",
            ["topic"],
            registry=r,
        )
        self._depth = Gauge(
            "dynamiq_queue_depth", "Messages stored in the queue", ["queue"], registry=r
        )
        self._approximate = Gauge(
            "dynamiq_queue_approximate_depth",
            "Depth as estimated by the node",
            ["queue"],
            registry=r,
        )
        self._in_flight = Gauge(
            "dynamiq_queue_in_flight", "Messages leased and not deleted", ["queue"], registry=r
        )
        self._fill = Gauge(
            "dynamiq_queue_fill_percent", "Fill of the last receive", ["queue"], registry=r
        )
        self._latency = Histogram(
            "dynamiq_http_request_seconds",
            "HTTP requests by route",
            ["route", "method", "status"],
            registry=r,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5),
        )
        self._errors = Counter("dynamiq_http_errors", "Error answers by code", ["code"], registry=r)
        self._members = Gauge("dynamiq_cluster_size", "Live nodes", registry=r)
        self._commit = Gauge(
            "dynamiq_store_commit_seconds", "Mean commit latency lately", registry=r
        )

    def sent(self, queue: str, count: int) -> None:
        """Count stored messages."""
        self._sent.labels(queue).inc(count)

    def received(self, queue: str, count: int, asked: int) -> None:
        """Count delivered messages and set the fill."""
        self._received.labels(queue).inc(count)
        self._fill.labels(queue).set(math.floor(count * 100 / max(asked, 1)))

    def deleted(self, queue: str, count: int) -> None:
        """Count deleted messages."""
        self._deleted.labels(queue).inc(count)

    def redelivered(self, queue: str, count: int) -> None:
        """Count redeliveries."""
        self._redelivered.labels(queue).inc(count)

    def lifecycle(self, queue: str, event: str, count: int) -> None:
        """Count dead-lettered, expired and redriven messages."""
        self._lifecycle[event].labels(queue).inc(count)

    def unrouted(self, topic: str, count: int) -> None:
        """Count a topic's messages that no subscription took."""
        self._unrouted.labels(topic).inc(count)

    def queue_level(self, queue: str, depth: int, in_flight: int) -> None:
        """Set depth and in-flight."""
        self._depth.labels(queue).set(depth)
        self._approximate.labels(queue).set(depth)  # one node: the estimate is exact
        self._in_flight.labels(queue).set(in_flight)

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Observe a request."""
        self._latency.labels(route, method, str(status)).observe(seconds)

    def error(self, code: str) -> None:
        """Count an error answer."""
        self._errors.labels(code).inc()

    def node_level(self, members: int, commit_seconds: float | None) -> None:
        """Set cluster size and commit latency."""
        self._members.set(members)
        if commit_seconds is not None:
            self._commit.set(commit_seconds)

    def flush(self) -> None:
        """Nothing to send: Prometheus pulls."""

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
