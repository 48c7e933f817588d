"""The sections of the settings, one class each: every default in one place, every value
validated once, here.

A bad value raises ``ConfigError`` naming the key (and, once read from its
sources by ``config_sources``, where the value came from).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from dynamiq.config.checks import read_secret, require, require_networks, require_one_secret
from dynamiq.errors import ConfigError, Invalid
from dynamiq.keyspace import WORKER_MARK
from dynamiq.models import MAX_DELAY_SECONDS, MAX_MESSAGE_BYTES
from dynamiq.push.endpoints import DEFAULT_DENY, EndpointRules

__all__ = [
    "LOOPBACK",
    "AuthSettings",
    "ClusterSettings",
    "CoreSettings",
    "LimitsSettings",
    "PushSettings",
    "SqsSettings",
    "StatsSettings",
    "StorageSettings",
    "TlsSettings",
    "require",
]

LOG_LEVELS = ("debug", "info", "warn", "warning", "error")
STATS_TYPES = ("statsd", "prometheus", "none")
BACKENDS = ("lmdb", "redis", "riak")
WRITERS = ("thread", "process")  # of the embedded store: see ``StorageSettings``
SQS_DOORS = ("sigv4", "open", "closed", "key")
AUTH_SWITCHES = {"auto": None, "true": True, "on": True, "yes": True}
AUTH_SWITCHES |= {"false": False, "off": False, "no": False}
LOOPBACK = ("127.0.0.1", "::1", "localhost")
# ``core.workers = auto`` serves a node with one process on machines of up to
# this many cores: measured on 2 cores (the node's clients on them too), a
# second worker took half as much again CPU a message, twice the memory and
# twice the latency, for no more throughput (docs/explanation/workers.md).
ONE_WORKER_CORES = 2


@dataclass(frozen=True, slots=True)
class CoreSettings:
    """``[core]``: the original Dynamiq's node settings, plus ``httpaddress``."""

    name: str = "dynamiq1"
    """This node's name, unique in the cluster; the members are ranked by name."""
    port: int = 7946
    """The gossip port (SWIM over UDP, and TCP for large packets)."""
    seedserver: str = ""
    """Seeds to join the cluster through: host or host:port, comma-separated."""
    seedport: int = 7946
    """The port of a seed entry that names none."""
    httpport: int = 8081
    """The HTTP port: v1, v2, the SQS/SNS endpoint, /metrics and the console."""
    httpaddress: str = "127.0.0.1"
    """The address the HTTP port binds to; keys are on by default anywhere but loopback."""
    riaknodes: str = ""
    """Riak KV nodes (host:port or http://host:port, comma-separated) for storage.backend = riak."""
    backendconnectionpool: int = 16
    """Connections to the store per process (Riak's and Redis's pools)."""
    syncconfiginterval: int = 2000
    """Milliseconds between reloads of the queues' and topics' settings from the store."""
    loglevelstring: str = "info"
    """The log level: debug, info, warn or error."""
    workers: str = "auto"
    """Processes serving the node: auto (one on up to 2 cores, else one per core) or 1 to 64."""
    front: str = "on"
    """on: v2's publish, receive and delete served by the node's own front end; off: by aiohttp."""

    def __post_init__(self) -> None:
        require(bool(self.name.strip()), "core.name", "must not be empty")
        require(self.front in ("on", "off"), "core.front", "must be on or off")
        require(
            WORKER_MARK not in self.name,
            "core.name",
            f"must not contain {WORKER_MARK!r} (it names a node's workers)",
        )
        require(
            self.workers == "auto" or (self.workers.isdigit() and 1 <= int(self.workers) <= 64),
            "core.workers",
            "must be auto or a count from 1 to 64",
        )
        for key in ("port", "seedport", "httpport"):
            require(0 <= getattr(self, key) <= 65535, f"core.{key}", "must be a port (0-65535)")
        require(self.backendconnectionpool >= 1, "core.backendconnectionpool", "must be >= 1")
        require(self.syncconfiginterval >= 10, "core.syncconfiginterval", "must be >= 10 (ms)")
        require(
            self.loglevelstring.lower() in LOG_LEVELS,
            "core.loglevelstring",
            f"must be one of {', '.join(LOG_LEVELS)}",
        )
        for node in self.riak_nodes():
            host, _, port = node.removeprefix("http://").rpartition(":")
            require(
                bool(host) and port.isdigit(),
                "core.riaknodes",
                f"{node!r} is not host:port or http://host:port",
            )
        for seed in self.seeds():
            host, _, port = seed.rpartition(":")
            require(
                bool(host) and port.isdigit() and 0 < int(port) < 65536,
                "core.seedserver",
                f"{seed!r} is not host or host:port",
            )

    def worker_count(self) -> int:
        """Return how many processes serve this node; ``auto``: one on up to
        ``ONE_WORKER_CORES`` cores it may use, else one per core."""
        if self.workers != "auto":
            return int(self.workers)
        cores = len(os.sched_getaffinity(0))
        return 1 if cores <= ONE_WORKER_CORES else min(64, cores)

    def riak_nodes(self) -> list[str]:
        """Return the Riak nodes' HTTP base URLs (``host:8098`` entries get ``http://``)."""
        entries = [e.strip().rstrip("/") for e in self.riaknodes.split(",") if e.strip()]
        return [e if e.startswith("http://") else f"http://{e}" for e in entries]

    def seeds(self) -> list[str]:
        """Return the seed nodes' gossip addresses as ``host:port``.

        An entry without a port takes ``seedport``, so several nodes can run
        on one host (``127.0.0.1:7947,127.0.0.1:7948``).
        """
        out = []
        for entry in (e.strip() for e in self.seedserver.split(",")):
            if entry:
                has_port = ":" in entry and not entry.endswith("]")
                out.append(entry if has_port else f"{entry}:{self.seedport}")
        return out


@dataclass(frozen=True, slots=True)
class StatsSettings:
    """``[stats]``: where metrics go."""

    type: str = "none"
    """statsd: StatsD to stats.address; none: nothing. /metrics (Prometheus) is always served."""
    flushinterval: float = 1.0
    """Seconds between two rounds of StatsD gauges."""
    address: str = "127.0.0.1:8125"
    """The StatsD server, host:port (UDP)."""
    prefix: str = ""
    """Put before every StatsD name."""
    maxqueueseries: int = 1000
    """Queues with Prometheus series of their own; the others are summed as queue "*"."""

    def __post_init__(self) -> None:
        require(self.type in STATS_TYPES, "stats.type", f"must be one of {', '.join(STATS_TYPES)}")
        require(self.flushinterval > 0, "stats.flushinterval", "must be > 0 (seconds)")
        require(self.maxqueueseries >= 1, "stats.maxqueueseries", "must be >= 1")
        host, _, port = self.address.rpartition(":")
        require(
            bool(host) and port.isdigit() and 0 < int(port) < 65536,
            "stats.address",
            "must be host:port",
        )


@dataclass(frozen=True, slots=True)
class StorageSettings:
    """``[storage]``: which store holds messages and configuration.

    ``path``, ``mapsize`` and ``writer`` are for ``lmdb`` (every backend keeps
    the node's lease journal in ``path``/journal; ``writer``: ``process``, one
    writer process commits for every worker of the node, or ``thread``, each
    process commits its own writes on a thread); ``url`` and ``waitreplicas``
    (replicas that must acknowledge each write) for ``redis``; ``timeout``
    (seconds a store call may take, waiting for a connection included) for
    ``riak``.
    """

    backend: str = "lmdb"
    """Where messages and configuration live: lmdb (embedded, no server), redis or riak."""
    path: str = "./data"
    """The data directory: the embedded store, and every backend's lease journal."""
    mapsize: int = 64 << 30
    """The embedded store's reserved address space (sizes such as 64GiB); it grows when reached."""
    writer: str = "process"
    """Who commits to the embedded store: process (one for the node) or thread (each process)."""
    url: str = "redis://127.0.0.1:6379/0"
    """Redis: a server's URL (redis://, rediss://, unix://), or a comma list of Cluster nodes."""
    waitreplicas: int = 0
    """Redis: replicas that must acknowledge each write before it is answered."""
    timeout: float = 5.0
    """Riak: seconds a store call may take, waiting for a connection included."""

    def __post_init__(self) -> None:
        require(
            self.backend in BACKENDS, "storage.backend", f"must be one of {', '.join(BACKENDS)}"
        )
        require(bool(self.path), "storage.path", "must not be empty")
        require(self.mapsize >= 1 << 20, "storage.mapsize", "must be >= 1048576 (bytes)")
        require(self.writer in WRITERS, "storage.writer", f"must be one of {', '.join(WRITERS)}")
        require(
            self.url.startswith(("redis://", "rediss://", "unix://")),
            "storage.url",
            "must be a redis://, rediss:// or unix:// URL",
        )
        require(self.waitreplicas >= 0, "storage.waitreplicas", "must be >= 0")
        require(0 < self.timeout <= 300, "storage.timeout", "must be in (0, 300] (seconds)")


@dataclass(frozen=True, slots=True)
class LimitsSettings:
    """``[limits]``: what one request may ask for."""

    maxbodybytes: int = 4 << 20
    """A request's body, at most; larger ones get 413 (room for a 1 MiB message in any encoding)."""
    maxmessagebytes: int = 1 << 20
    """A message's body and attributes, at most (SQS's limit); larger ones get 422."""
    maxbatch: int = 1000
    """The most messages in one publish, receive or delete; more get 422."""
    maxwaitseconds: float = 20.0
    """The longest long poll a receive may ask for."""
    shutdowntimeout: float = 10.0
    """Seconds in-flight requests may take to finish on SIGTERM."""
    backlog: int = 1024
    """Connections waiting to be accepted (bursts of new clients)."""
    maxdelayseconds: float = 900.0
    """The longest delay a message or a queue may ask for."""
    maxconnections: int = 10000
    """Open client connections; beyond them, 503 and closed."""
    maxwaiting: int = 5000
    """Receives waiting for messages at once; beyond them, 503."""
    idletimeout: float = 30.0
    """Seconds a connection may go without a whole request's headers."""
    bodytimeout: float = 30.0
    """Seconds a request's body may take to arrive; beyond them, 408."""
    maxpendingbytes: int = 256 << 20
    """Request bodies held at once; beyond it requests wait, then 503."""
    diskfreelimit: int = 256 << 20
    """Free bytes under the data directory; below it, publishes get 503."""
    diskreserve: int = 4 << 20
    """Bytes kept aside on that disk, released for deletes when it is full."""
    syncfanout: int = 1000
    """A topic's copies of a message made before the answer; wider ones are copied behind it."""
    replayrate: float = 0.0
    """Messages a second one replay of a FIFO topic's archive delivers; 0: no bound."""

    def __post_init__(self) -> None:
        require(self.maxconnections >= 1, "limits.maxconnections", "must be >= 1")
        require(self.maxwaiting >= 1, "limits.maxwaiting", "must be >= 1")
        require(self.idletimeout > 0, "limits.idletimeout", "must be > 0")
        require(self.bodytimeout > 0, "limits.bodytimeout", "must be > 0")
        require(
            self.maxpendingbytes >= self.maxbodybytes,
            "limits.maxpendingbytes",
            "must be >= limits.maxbodybytes",
        )
        for key in ("diskfreelimit", "diskreserve", "replayrate"):
            require(getattr(self, key) >= 0, f"limits.{key}", "must be >= 0")
        require(self.syncfanout >= 1, "limits.syncfanout", "must be >= 1")
        require(1 <= self.backlog <= 65535, "limits.backlog", "must be in [1, 65535]")
        require(self.maxbodybytes >= 1024, "limits.maxbodybytes", "must be >= 1024")
        require(
            1024 <= self.maxmessagebytes <= MAX_MESSAGE_BYTES,
            "limits.maxmessagebytes",
            f"must be in [1024, {MAX_MESSAGE_BYTES}]",
        )
        require(self.maxbatch >= 1, "limits.maxbatch", "must be >= 1")
        require(0 <= self.maxwaitseconds <= 3600, "limits.maxwaitseconds", "must be in [0, 3600]")
        require(self.shutdowntimeout > 0, "limits.shutdowntimeout", "must be > 0")
        require(
            0 <= self.maxdelayseconds <= MAX_DELAY_SECONDS,
            "limits.maxdelayseconds",
            f"must be in [0, {MAX_DELAY_SECONDS:g}]",
        )


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """``[cluster]``: gossip between nodes (the original's ``core.port``/``seed*`` say where).

    Gossip is on when a secret is set: every packet is signed with it, and a
    node refuses seeds without one. ``address`` is where gossip binds and what
    the others call this node (``core.httpaddress`` when empty).
    """

    secret: str = ""
    """Gossip's shared secret: every packet is signed with it; required with core.seedserver."""
    secret_file: str = ""
    """A file holding the secret, instead of cluster.secret."""
    address: str = ""
    """Where gossip binds and how the others reach this node; core.httpaddress when empty."""
    pinginterval: float = 0.2
    """Seconds between the failure detector's pings."""
    suspecttimeout: float = 1.0
    """Seconds a silent member stays suspect before it is offline."""

    def __post_init__(self) -> None:
        require(0.01 <= self.pinginterval <= 10, "cluster.pinginterval", "must be in [0.01, 10]")
        require(
            self.pinginterval <= self.suspecttimeout <= 60,
            "cluster.suspecttimeout",
            "must be in [pinginterval, 60] (seconds)",
        )
        require_one_secret(self.secret, "cluster.secret", self.secret_file, "cluster.secret_file")

    def shared_secret(self) -> str:
        """Return the secret, reading ``secret_file`` when that is how it was given."""
        return read_secret(self.secret, self.secret_file, "cluster.secret_file")


@dataclass(frozen=True, slots=True)
class SqsSettings:
    """``[sqs]``: what the SQS-compatible endpoint puts in ARNs and queue URLs."""

    region: str = "us-east-1"
    """The region in the SQS/SNS endpoint's ARNs (arn:aws:sqs:<region>:<account>:<name>)."""
    account: str = "000000000000"
    """The 12-digit account in the SQS/SNS endpoint's ARNs and queue URLs."""

    def __post_init__(self) -> None:
        require(
            re.fullmatch(r"[a-z]{2}(-[a-z0-9]+)+", self.region) is not None,
            "sqs.region",
            "must look like an AWS region (us-east-1)",
        )
        require(
            re.fullmatch(r"[0-9]{12}", self.account) is not None,
            "sqs.account",
            "must be 12 digits",
        )


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """``[auth]``: application keys on every route but the cluster's own.

    ``enabled`` is ``auto`` by default: off on a loopback address, on anywhere
    else. ``v1``, ``sqs`` and ``metrics`` say how those APIs, whose clients
    cannot always send a key, let callers in; ``failedpersecond``/``failedburst``
    bound wrong keys and failing signatures per client address.
    """

    enabled: str = "auto"
    """Application keys: auto (off on a loopback core.httpaddress, else on), true or false."""
    adminkey: str = ""
    """The administrator's key (at least 32 bytes; `dynamiq keys secret` makes one)."""
    adminkeyfile: str = ""
    """A file holding the administrator's key, instead of auth.adminkey."""
    v1: str = "key"
    """open: v1 served without keys (its clients send none; keep it private); key: v1 needs one."""
    sqs: str = "sigv4"
    """SQS/SNS endpoint: sigv4 (signatures checked), open (unchecked: keep it private), closed."""
    metrics: str = "key"
    """open: /metrics without a key; key: an administrator's or a monitor's key."""
    failedpersecond: float = 1.0
    """Wrong keys a client address may send a second (the bucket's refill rate)."""
    failedburst: int = 20
    """Wrong keys a client address may send at once; beyond them, 429 until the bucket refills."""
    hosts: str = ""
    """Names clients may call this node by while keys are off, comma-separated (DNS rebinding)."""
    maxskewseconds: int = 900
    """How far a SigV4 request's date may be off the node's clock, either way (AWS: 15 min)."""
    presigned: bool = True
    """Whether the SQS/SNS endpoint takes presigned URLs (the signature in the query)."""
    trustedproxies: str = ""
    """Proxies whose X-Forwarded-Proto and X-Forwarded-Host are believed, comma-separated CIDRs."""

    def __post_init__(self) -> None:
        require(
            self.enabled.lower() in AUTH_SWITCHES,
            "auth.enabled",
            "must be auto, true or false",
        )
        for key in ("v1", "metrics"):
            require(getattr(self, key) in ("open", "key"), f"auth.{key}", "must be open or key")
        require(self.sqs in SQS_DOORS, "auth.sqs", "must be sigv4, open or closed")
        require(0 < self.maxskewseconds <= 3600, "auth.maxskewseconds", "must be 1 to 3600")
        require_networks(self.trustedproxies, "auth.trustedproxies")
        require_one_secret(self.adminkey, "auth.adminkey", self.adminkeyfile, "auth.adminkeyfile")
        require(self.failedpersecond > 0, "auth.failedpersecond", "must be > 0")
        require(self.failedburst >= 1, "auth.failedburst", "must be >= 1")

    def on(self, address: str) -> bool:
        """Whether keys are required on a node whose HTTP port is bound to ``address``."""
        switch = AUTH_SWITCHES[self.enabled.lower()]
        return address not in LOOPBACK if switch is None else switch

    @property
    def sqs_door(self) -> str:
        """How the SQS/SNS endpoint lets callers in: sigv4, open or closed (``key``, the
        old spelling, is sigv4)."""
        return "sigv4" if self.sqs == "key" else self.sqs

    def proxies(self) -> list[str]:
        """``trustedproxies`` as a list of CIDRs."""
        return [p.strip() for p in self.trustedproxies.split(",") if p.strip()]

    def host_names(self) -> list[str]:
        """Return ``hosts`` as a list of lower-case names."""
        return [h.strip().lower() for h in self.hosts.split(",") if h.strip()]

    def admin_key(self) -> str:
        """Return the administrator's key, reading ``adminkeyfile`` when that is how it
        was given ("" when there is none)."""
        return read_secret(self.adminkey, self.adminkeyfile, "auth.adminkeyfile")


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """``[tls]``: HTTPS on the HTTP port and between nodes.

    ``certfile``/``keyfile`` (PEM) turn it on; they are read again on SIGHUP.
    With ``cafile``, clients must show a certificate it signed. Peers are
    called over HTTPS and must show a certificate ``peercafile`` signed (the
    system's trusted authorities when empty) for the address they gossip; a
    node shows its own certificate to them, so ``cafile`` works between nodes
    too.
    """

    certfile: str = ""
    """This node's certificate (chain, PEM); with tls.keyfile, turns HTTPS on."""
    keyfile: str = ""
    """The certificate's private key (PEM)."""
    cafile: str = ""
    """Clients must show a certificate one of these authorities signed (PEM)."""
    peercafile: str = ""
    """The authorities peers' certificates are checked against (the system's when empty)."""

    def __post_init__(self) -> None:
        given, missing = ("certfile", "keyfile") if self.certfile else ("keyfile", "certfile")
        require(
            bool(self.certfile) == bool(self.keyfile),
            f"tls.{missing}",
            f"is required when tls.{given} is set",
        )
        require(
            self.enabled or not (self.cafile or self.peercafile),
            "tls.certfile",
            "is required when tls.cafile or tls.peercafile is set",
        )
        for key in ("certfile", "keyfile", "cafile", "peercafile"):
            path = getattr(self, key)
            require(not path or os.access(path, os.R_OK), f"tls.{key}", f"cannot read {path}")

    @property
    def enabled(self) -> bool:
        """Whether the node serves HTTPS."""
        return bool(self.certfile)


@dataclass(frozen=True, slots=True)
class PushSettings:
    """``[push]``: deliveries to HTTP/S endpoints (``dynamiq.push.endpoints`` says the rules).

    ``url`` is where endpoints reach the cluster for ``SubscribeURL``,
    ``UnsubscribeURL`` and the signing certificate (this node's own address
    when empty); ``allow``/``deny`` are host names (``*.example.com``) and
    CIDRs, comma-separated.
    """

    url: str = ""
    """Where endpoints reach the cluster (SubscribeURL, certificate); this node when empty."""
    allow: str = ""
    """Host names (*.example.com) and CIDRs endpoints may be on; empty: any not denied."""
    deny: str = DEFAULT_DENY
    """Host names and CIDRs never pushed to (cloud metadata); this node's own ports neither."""
    timeout: float = 15.0
    """Seconds one delivery may take, connection to answer (AWS's)."""
    connecttimeout: float = 5.0
    """Seconds a delivery's connection may take."""
    concurrency: int = 16
    """Deliveries in flight per subscription, per worker."""
    cafile: str = ""
    """PEM certificates https endpoints may show besides the system's."""

    def __post_init__(self) -> None:
        require(
            not self.url or re.fullmatch(r"https?://[^/?#\s]+(/[^?#\s]*)?", self.url) is not None,
            "push.url",
            "must be an http or https base URL (https://dynamiq.example.com)",
        )
        try:
            EndpointRules(self.allow, self.deny)
        except Invalid as exc:
            raise ConfigError(str(exc), key=exc.field) from None
        require(0 < self.timeout <= 60, "push.timeout", "must be > 0 and <= 60 (seconds)")
        require(
            0 < self.connecttimeout <= self.timeout,
            "push.connecttimeout",
            "must be > 0 and <= push.timeout",
        )
        require(1 <= self.concurrency <= 1000, "push.concurrency", "must be 1 to 1000")
        require(
            not self.cafile or os.access(self.cafile, os.R_OK),
            "push.cafile",
            f"cannot read {self.cafile}",
        )
