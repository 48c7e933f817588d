"""What handlers reach through the app: one typed key holding the node and its observers."""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from dynamiq.access.guard import Guard
from dynamiq.api.aws.accounts import Accounts
from dynamiq.api.intake import Intake
from dynamiq.cluster.wire import PeerSigner
from dynamiq.config import LimitsSettings, SqsSettings
from dynamiq.metrics.base import Metrics
from dynamiq.service.node import Node

__all__ = ["SERVICES", "AwsDoor", "Services", "services_of"]


@dataclass(frozen=True, slots=True)
class AwsDoor:
    """How the SQS and SNS endpoint lets callers in while keys are on (``auth.sqs``)."""

    mode: str = "sigv4"  # sigv4: signatures checked; open: served to all; closed: to none
    max_skew: float = 900  # seconds a request's date may be off the node's clock
    presigned: bool = True  # presigned URLs taken
    # Proxies whose X-Forwarded-Host and X-Forwarded-Proto are believed.
    proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    def trusts(self, remote: str) -> bool:
        """Whether the client at ``remote`` is a proxy this node believes."""
        if not self.proxies:
            return False
        try:
            address = ipaddress.ip_address(remote)
        except ValueError:
            return False
        return any(address in network for network in self.proxies)


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
    aws: AwsDoor = field(default_factory=AwsDoor)
    # The applications' accounts in the SQS/SNS endpoint's ARNs and URLs.
    accounts: Accounts = field(default_factory=lambda: Accounts("000000000000", list))
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
