"""A node built on its ground: the engine, its cluster parts, push delivery, reporting,
and the services the HTTP layer reaches them through.

Built before the app (the app's handlers need the services); ``parts`` then
runs each with the app.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path

from dynamiq.access.guard import Guard
from dynamiq.api.aws.accounts import Accounts
from dynamiq.api.aws.grants import Deliveries
from dynamiq.api.context import AwsDoor, Services
from dynamiq.api.intake import Intake
from dynamiq.cluster.quorum import Quorum
from dynamiq.config import LOOPBACK, Settings
from dynamiq.core.archives import Archives
from dynamiq.core.catalog import Catalog
from dynamiq.core.custody.journal import LeaseJournal
from dynamiq.core.janitor import Janitor
from dynamiq.core.lifecycle.redrive import Redriver
from dynamiq.core.push.documents import PUSH_PREFIX
from dynamiq.core.queues import QueueService
from dynamiq.core.reporter import Reporter
from dynamiq.core.routing.notifications import Envelopes
from dynamiq.core.spreads import Spreader
from dynamiq.core.topics import TopicService
from dynamiq.process.ground import Ground
from dynamiq.push.client import HttpPoster
from dynamiq.push.endpoints import EndpointRules
from dynamiq.service.node import Node
from dynamiq.service.parts import Cluster, Engine
from dynamiq.service.push.pusher import Pusher
from dynamiq.service.push.webhooks import Webhooks
from dynamiq.service.reports import live_nodes

__all__ = ["Built", "build"]


@dataclass(frozen=True)
class Built:
    """What a node runs beside its ground, built and not yet started."""

    engine: Engine
    cluster: Cluster
    node: Node
    reporter: Reporter
    webhooks: Webhooks
    poster: HttpPoster  # the HTTP client deliveries go through
    pusher: Pusher
    accounts: Accounts  # the applications' accounts in SQS's and SNS's ARNs and URLs

    def services(self, ground: Ground) -> Services:
        """What the HTTP layer's handlers reach through the app."""
        settings = ground.settings
        return Services(
            node=self.node,
            metrics=ground.metrics,
            render_metrics=ground.prometheus.render,
            read_levels=self.reporter.report_queues,
            peers=ground.signer,
            sqs=settings.sqs,
            guard=_guard(ground),
            keyless=frozenset(
                api for api in ("v1", "sqs", "metrics") if getattr(settings.auth, api) == "open"
            ),
            aws=AwsDoor(
                settings.auth.sqs_door,
                settings.auth.maxskewseconds,
                settings.auth.presigned,
                tuple(ipaddress.ip_network(p, strict=False) for p in settings.auth.proxies()),
            ),
            accounts=self.accounts,
            hosts=frozenset(_host_names(settings)),
            intake=Intake(settings.limits.maxpendingbytes),
        )


def build(ground: Ground) -> Built:
    """Build a node's parts on ``ground``, top-down."""
    settings, seat, reach = ground.settings, ground.seat, ground.reach
    accounts = Accounts(ground.settings.sqs.account, functools.partial(_applications, ground))
    engine = _engine(ground, accounts)
    accounts.learn_from(functools.partial(_applications, ground, engine.catalog))
    counted = seat is not None and seat.quorum  # a node alone's workers count no majority
    quorum = Quorum(reach.me(), settings.cluster.suspecttimeout) if counted else None
    cluster = Cluster.build(reach, quorum, engine.queues, engine.janitor)
    rules = _endpoint_rules(ground)
    webhooks = Webhooks(
        engine.catalog,
        engine.queues,
        ground.store,
        rules,
        ground.clock,
        settings.push.url or _public_url(ground),
        settings.sqs.region,
        settings.sqs.account,
        accounts.address,
    )
    node = Node(engine, cluster, settings.limits, ground.space, webhooks)
    push = settings.push
    poster = HttpPoster(rules, push.timeout, push.connecttimeout, push.cafile)
    pusher = Pusher(
        webhooks,
        engine.catalog,
        engine.queues,
        cluster.majority,
        poster,
        node.publish,
        ground.clock,
        ground.metrics,
        push.concurrency,
        push.timeout,
    )
    reporter = _reporter(ground, engine)
    return Built(engine, cluster, node, reporter, webhooks, poster, pusher, accounts)


def _engine(ground: Ground, accounts: Accounts) -> Engine:
    """The queue engine, on the ground's store; catalog changes are told to the peers."""
    settings, store, clock, reach = ground.settings, ground.store, ground.clock, ground.reach
    membership, name = reach.membership, reach.me()
    interval = settings.core.syncconfiginterval / 1000
    # The log of changes outlives many rounds: a process behind it reads everything.
    catalog = Catalog(store, clock, on_change=reach.tell_peers, keep_log=max(60.0, 30 * interval))
    # With gossip, nothing is served until the cluster hands this node its slice.
    keyspace = None if reach.client else membership.slice_of(name)
    queues = QueueService(
        store,
        catalog,
        clock,
        keyspace=keyspace,
        metrics=ground.metrics,
        journal=LeaseJournal(Path(settings.storage.path) / "journal", name, clock),
        awake=membership.awake,
        stirred=reach.board.stir if reach.board else None,
    )
    reloads = (ground.keys.reload,) if ground.keys else ()
    janitor = Janitor(queues, interval, reloads)
    redriver = Redriver(queues.context, name, queues.states, queues.life)
    envelopes = Envelopes(settings.sqs.region, settings.sqs.account, clock, accounts.address)
    spreader = Spreader(queues, settings.limits.syncfanout)
    crossings = Deliveries(settings.sqs.region, accounts, PUSH_PREFIX)
    topics = TopicService(catalog, queues, envelopes, ground.metrics, spreader, crossings)
    archives = Archives(queues, name, settings.limits.replayrate)
    return Engine(catalog, queues, topics, janitor, redriver, spreader, archives)


def _reporter(ground: Ground, engine: Engine) -> Reporter:
    """The metrics a node reports of its queues, now and then."""
    stats, membership = ground.settings.stats, ground.reach.membership
    return Reporter(
        engine.queues,
        ground.store,
        ground.metrics,
        stats.flushinterval,
        lambda: len(live_nodes(membership)),
        queue_levels=stats.type == "statsd",
    )


def _applications(ground: Ground, catalog: Catalog | None = None) -> list[str]:
    """Every application the node knows (its keys') and every queue's and topic's full
    name (which start with theirs)."""
    keys = ground.keys
    known = [] if keys is None else [r.application for r in keys.records()]
    return known if catalog is None else known + catalog.index.names() + catalog.topics()


def _guard(ground: Ground) -> Guard:
    """The door requests pass: their key's principal, and the rate of failed ones."""
    auth, keys = ground.settings.auth, ground.keys
    return Guard(
        keys,
        auth.admin_key() if keys else "",
        auth.failedpersecond,
        auth.failedburst,
        ground.clock,
        ground.reach.announced,
    )


def _endpoint_rules(ground: Ground) -> EndpointRules:
    """The ``[push]`` rules, this node's own ports (HTTP, gossip) and addresses among them."""
    settings, seat = ground.settings, ground.seat
    ports = {ground.sock.getsockname()[1]}
    if seat is not None:
        ports.add(int(seat.gossip.rpartition(":")[2]))
        ports.add(seat.peers.getsockname()[1])
    own = [settings.core.httpaddress, settings.cluster.address]
    return EndpointRules(settings.push.allow, settings.push.deny, ports, own)


def _public_url(ground: Ground) -> str:
    """Where endpoints reach this node when ``push.url`` does not say: its own address
    (the cluster's address or the host's name when it listens on every address)."""
    url, host = ground.url, ground.sock.getsockname()[0]
    if host in ("0.0.0.0", "::"):
        named = ground.settings.cluster.address or socket.gethostname()
        url = url.replace(f"[{host}]" if ":" in host else host, named, 1)
    return url


def _host_names(settings: Settings) -> list[str]:
    """The names a node answers to while keys are off: loopback's, its own, the configured."""
    own = [settings.core.httpaddress, settings.cluster.address, socket.gethostname()]
    named = [n.lower().strip("[]") for n in own if n and n not in ("0.0.0.0", "::")]
    return [*LOOPBACK, *named, *settings.auth.host_names()]
