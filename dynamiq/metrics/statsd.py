"""StatsD sink with the original Dynamiq's names: aggregated in memory, flushed on an interval.

Per queue (``<prefix><queue>.``): ``sent.count``, ``received.count``,
``deleted.count``, ``redelivered.count``, ``dead_lettered.count``,
``expired.count``, ``redriven.count`` (counters); ``depth.count``,
``approximate_depth.count``, ``fill.count``, ``in_flight.count`` (gauges).
Per node (``<prefix>node.``): ``requests.<route>.<method>.<status>`` and
``errors.<CODE>`` (counters), ``latency.<route>.<method>`` (timings, ms),
``in_flight``, ``cluster_size``, ``commit_ms`` (gauges). The prefix is
prepended verbatim, as the original did.

A queue's depth and in-flight gauges are sent when they changed since they
were last sent, not every flush: a node with many idle queues sends little
(StatsD servers keep a gauge's last value).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import statsd

from dynamiq.metrics.base import TOPIC_EVENTS

__all__ = ["SERIES", "StatsdMetrics", "route_key"]

# Every name the sink sends (after ``stats.prefix``): name, StatsD type, meaning. The
# documentation's metrics page is made from it, and a test holds the sink to it.
SERIES = (
    ("<queue>.sent.count", "counter", "Messages stored in the queue"),
    ("<queue>.received.count", "counter", "Messages delivered from the queue"),
    ("<queue>.deleted.count", "counter", "Messages deleted"),
    ("<queue>.redelivered.count", "counter", "Messages delivered again"),
    ("<queue>.dead_lettered.count", "counter", "Messages moved to the dead-letter queue"),
    ("<queue>.expired.count", "counter", "Messages dropped at the end of their time to live"),
    ("<queue>.redriven.count", "counter", "Messages moved back by a redrive"),
    ("<queue>.deduplicated.count", "counter", "Publishes dropped as duplicates"),
    ("<queue>.depth.count", "gauge", "Messages stored in the queue"),
    ("<queue>.approximate_depth.count", "gauge", "Depth as estimated by the node"),
    ("<queue>.in_flight.count", "gauge", "Messages leased and not deleted"),
    ("<queue>.fill.count", "gauge", "Fill of the last receive, in percent of what it asked"),
    (
        "topics.<topic>.<event>.count",
        "counter",
        "A topic's messages by event: " + ", ".join(TOPIC_EVENTS),
    ),
    ("node.redeliveries", "counter", "Redeliveries on the node, every queue's"),
    ("node.requests.<route>.<method>.<status>", "counter", "HTTP requests by route"),
    ("node.errors.<CODE>", "counter", "Error answers by code"),
    ("node.latency.<route>.<method>", "timer", "HTTP requests' latency, ms"),
    ("push.<subscription>.latency", "timer", "Attempts to deliver to a push endpoint, ms"),
    ("push.<subscription>.in_flight", "gauge", "Deliveries to a push endpoint under way"),
    ("node.in_flight", "gauge", "Messages leased on the node"),
    ("node.cluster_size", "gauge", "Live nodes"),
    ("node.commit_ms", "gauge", "Mean commit latency lately, ms"),
)

MAX_TIMINGS_PER_FLUSH = 1000


def route_key(route: str) -> str:
    """Turn a route template (``/v2/queues/{queue}/receive``) into a StatsD key part."""
    return re.sub(r"[^A-Za-z0-9_]+", ".", route).strip(".") or "unmatched"


class StatsdMetrics:
    """Counts and levels kept between flushes, sent as size-bounded UDP packets."""

    def __init__(self, host: str, port: int, prefix: str, max_packet: int = 512) -> None:
        self._client = statsd.StatsClient(host, port, maxudpsize=max_packet)
        self._prefix = prefix
        self._counters: dict[str, int] = {}
        self._gauges: dict[str, float] = {}
        self._timings: list[tuple[str, float]] = []
        self._in_flight: dict[str, int] = {}
        self._levels: dict[str, float] = {}  # queues' levels reported since the last flush
        self._sent_levels: dict[str, float] = {}  # and as they were last sent

    def _count(self, name: str, value: int) -> None:
        key = self._prefix + name
        self._counters[key] = self._counters.get(key, 0) + value

    def sent(self, counts: Mapping[str, int]) -> None:
        """Count stored messages."""
        for queue, count in counts.items():
            self._count(f"{queue}.sent.count", count)

    def received(self, queue: str, count: int, asked: int) -> None:
        """Count delivered messages; the fill of this receive, in percent."""
        self._count(f"{queue}.received.count", count)
        self._gauges[f"{self._prefix}{queue}.fill.count"] = math.floor(count * 100 / max(asked, 1))

    def deleted(self, queue: str, count: int) -> None:
        """Count deleted messages."""
        self._count(f"{queue}.deleted.count", count)

    def redelivered(self, queue: str, count: int) -> None:
        """Count redeliveries, per queue and for the node."""
        self._count(f"{queue}.redelivered.count", count)
        self._count("node.redeliveries", count)

    def lifecycle(self, queue: str, event: str, count: int) -> None:
        """Count dead-lettered, expired and redriven messages per queue."""
        self._count(f"{queue}.{event}.count", count)

    def topic_event(self, topic: str, event: str, count: int) -> None:
        """Count a topic's published, delivered, unrouted and filtered-out messages."""
        self._count(f"topics.{topic}.{event}.count", count)

    def queue_level(self, queue: str, depth: int, in_flight: int) -> None:
        """Set depth (the real count; one node: the approximation is exact) and in-flight."""
        p = self._prefix
        self._levels[f"{p}{queue}.depth.count"] = depth
        self._levels[f"{p}{queue}.approximate_depth.count"] = depth
        self._levels[f"{p}{queue}.in_flight.count"] = in_flight
        self._in_flight[queue] = in_flight
        self._gauges[f"{p}node.in_flight"] = sum(self._in_flight.values())

    def push_attempt(self, subscription: str, seconds: float, in_flight: int) -> None:
        """Keep a delivery's latency; set the subscription's deliveries in flight."""
        self._gauges[f"{self._prefix}push.{subscription}.in_flight"] = in_flight
        if len(self._timings) < MAX_TIMINGS_PER_FLUSH:
            self._timings.append((f"{self._prefix}push.{subscription}.latency", seconds * 1000))

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count the request and keep its latency."""
        key = f"{route_key(route)}.{method.lower()}"
        self._count(f"node.requests.{key}.{status}", 1)
        if len(self._timings) < MAX_TIMINGS_PER_FLUSH:
            self._timings.append((f"{self._prefix}node.latency.{key}", seconds * 1000))

    def error(self, code: str) -> None:
        """Count an error answer by code."""
        self._count(f"node.errors.{code}", 1)

    def node_level(self, members: int, commit_seconds: float | None) -> None:
        """Set cluster size and commit latency."""
        self._gauges[f"{self._prefix}node.cluster_size"] = members
        if commit_seconds is not None:
            self._gauges[f"{self._prefix}node.commit_ms"] = round(commit_seconds * 1000, 3)

    def flush(self) -> None:
        """Send everything aggregated since the last flush, then start afresh."""
        pipe = self._client.pipeline()
        for name, value in self._counters.items():
            pipe.incr(name, value)
        for name, level in self._gauges.items():
            pipe.gauge(name, level)
        for name, level in self._levels.items():
            if self._sent_levels.get(name) != level:
                pipe.gauge(name, level)
                self._sent_levels[name] = level
        for name, ms in self._timings:
            pipe.timing(name, ms)
        self._counters, self._gauges, self._levels, self._timings = {}, {}, {}, []
        pipe.send()

    def close(self) -> None:
        """Close the socket."""
        self._client.close()
