"""What handlers reach through the app: one typed key holding the node and its observers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from dynamiq.access.guard import Guard
from dynamiq.api.intake import Intake
from dynamiq.cluster.wire import PeerSigner
from dynamiq.config import LimitsSettings, SqsSettings
from dynamiq.metrics.base import Metrics
from dynamiq.service.node import Node

__all__ = ["SERVICES", "Services", "services_of"]


@dataclass(frozen=True, slots=True)
class Services:
    """The node as the HTTP layer sees it, and where its answers are counted."""

    node: Node
    metrics: Metrics
    render_metrics: Callable[[], bytes]  # the Prometheus text exposition
    read_levels: Callable[[], Awaitable[None]]  # queue depths into the sinks, before a scrape
    peers: PeerSigner | None = None  # checks members' internal requests; None: no gossip
    # The region and account the SQS endpoint puts in its ARNs.
    sqs: SqsSettings = field(default_factory=SqsSettings)
    guard: Guard = field(default_factory=lambda: Guard(None))  # keys off by default
    keyless: frozenset[str] = frozenset()  # APIs served without keys while they are on
    # The names requests may give in ``Host`` while keys are off; empty: any.
    hosts: frozenset[str] = frozenset()
    # Room for the request bodies the node holds at once (``limits.maxpendingbytes``).
    intake: Intake = field(default_factory=lambda: Intake(LimitsSettings().maxpendingbytes))


SERVICES = web.AppKey("services", Services)

_FOUND = web.RequestKey("services", Services)  # a request's, once looked up


def services_of(request: web.Request) -> Services:
    """Return the services serving ``request``: the apps it went through are searched
    once per request (several layers ask for them)."""
    found = request.get(_FOUND)
    if found is None:
        found = request[_FOUND] = request.config_dict[SERVICES]
    return found
