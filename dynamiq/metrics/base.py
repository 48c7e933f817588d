"""The metrics port: what the engine and the HTTP layer report, whatever the sink."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

__all__ = ["LIFECYCLE_EVENTS", "TOPIC_EVENTS", "Metrics", "MetricsFanout"]

# What can happen to a message besides its delete (``Metrics.lifecycle``).
LIFECYCLE_EVENTS = ("dead_lettered", "expired", "redriven", "deduplicated")
# What a topic counts (``Metrics.topic_event``), after SNS's CloudWatch metrics:
# messages published, copies delivered to queues and endpoints, messages no
# subscription took, failed pushes (every attempt, as SNS counts them), pushes
# given up and moved to the subscription's dead-letter queue, and copies a
# filter kept from its queue, by why.
TOPIC_EVENTS = (
    "published",
    "delivered",
    "unrouted",
    "failed",
    "redriven_to_dlq",
    "filtered_out_attributes",
    "filtered_out_body",
    "filtered_out_no_attributes",
    "filtered_out_invalid_body",
)


class Metrics(Protocol):
    """Events and levels worth watching. Calls are cheap: sinks aggregate, then flush."""

    def sent(self, counts: Mapping[str, int]) -> None:
        """Record messages stored durably: per queue, how many (a publish's, one call
        for every queue a fan-out stored into)."""
        ...

    def received(self, queue: str, count: int, asked: int) -> None:
        """Record a receive that asked for ``asked`` messages and returned ``count``."""
        ...

    def deleted(self, queue: str, count: int) -> None:
        """Record ``count`` messages actually deleted (unknown ids are not counted)."""
        ...

    def redelivered(self, queue: str, count: int) -> None:
        """Record ``count`` messages delivered again after their lease ended."""
        ...

    def lifecycle(self, queue: str, event: str, count: int) -> None:
        """Record ``count`` messages of ``queue`` that took a lifecycle step: ``event`` is
        one of ``LIFECYCLE_EVENTS`` (``dead_lettered``, ``expired``, ``redriven``,
        ``deduplicated``: publishes not stored, their dedup id seen within the window)."""
        ...

    def topic_event(self, topic: str, event: str, count: int) -> None:
        """Record ``count`` of ``topic``'s ``event``: one of ``TOPIC_EVENTS``."""
        ...

    def queue_level(self, queue: str, depth: int, in_flight: int) -> None:
        """Set a queue's real depth and its messages in flight."""
        ...

    def push_attempt(self, subscription: str, seconds: float, in_flight: int) -> None:
        """Record one attempt to deliver to a push subscription's endpoint (its id): how
        long it took, and how many of its deliveries this process has in flight."""
        ...

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Record one HTTP request by route template."""
        ...

    def error(self, code: str) -> None:
        """Record one error answer by its code."""
        ...

    def node_level(self, members: int, commit_seconds: float | None) -> None:
        """Set the cluster size and the store's mean commit latency lately."""
        ...

    def flush(self) -> None:
        """Send what was aggregated since the last flush (no-op for pull sinks)."""
        ...

    def close(self) -> None:
        """Release what the sink holds (a socket); nothing is recorded after."""
        ...


class MetricsFanout:
    """Every call to each of several sinks; with none, a sink that drops everything."""

    def __init__(self, sinks: Sequence[Metrics]) -> None:
        self._sinks = tuple(sinks)

    def sent(self, counts: Mapping[str, int]) -> None:
        """Record in every sink."""
        for sink in self._sinks:
            sink.sent(counts)

    def received(self, queue: str, count: int, asked: int) -> None:
        """Record in every sink."""
        for sink in self._sinks:
            sink.received(queue, count, asked)

    def deleted(self, queue: str, count: int) -> None:
        """Record in every sink."""
        for sink in self._sinks:
            sink.deleted(queue, count)

    def redelivered(self, queue: str, count: int) -> None:
        """Record in every sink."""
        for sink in self._sinks:
            sink.redelivered(queue, count)

    def lifecycle(self, queue: str, event: str, count: int) -> None:
        """Record in every sink."""
        for sink in self._sinks:
            sink.lifecycle(queue, event, count)

    def topic_event(self, topic: str, event: str, count: int) -> None:
        """Record in every sink."""
        for sink in self._sinks:
            sink.topic_event(topic, event, count)

    def queue_level(self, queue: str, depth: int, in_flight: int) -> None:
        """Record in every sink."""
        for sink in self._sinks:
            sink.queue_level(queue, depth, in_flight)

    def push_attempt(self, subscription: str, seconds: float, in_flight: int) -> None:
        """Record in every sink."""
        for sink in self._sinks:
            sink.push_attempt(subscription, seconds, in_flight)

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Record in every sink."""
        for sink in self._sinks:
            sink.request(route, method, status, seconds)

    def error(self, code: str) -> None:
        """Record in every sink."""
        for sink in self._sinks:
            sink.error(code)

    def node_level(self, members: int, commit_seconds: float | None) -> None:
        """Record in every sink."""
        for sink in self._sinks:
            sink.node_level(members, commit_seconds)

    def flush(self) -> None:
        """Flush every sink."""
        for sink in self._sinks:
            sink.flush()

    def close(self) -> None:
        """Close every sink."""
        for sink in self._sinks:
            sink.close()
