"""Settings: a node's sections together, and what holds between them, validated once.

A bad value raises ``ConfigError`` naming the key (and, once read from its
sources by ``sources``, where the value came from).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dynamiq.config.sections import (
    AuthSettings,
    ClusterSettings,
    CoreSettings,
    LimitsSettings,
    PushSettings,
    SqsSettings,
    StatsSettings,
    StorageSettings,
    TlsSettings,
    require,
)

__all__ = ["SECTIONS", "Settings"]


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a node is configured with."""

    core: CoreSettings = field(default_factory=CoreSettings)
    stats: StatsSettings = field(default_factory=StatsSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    limits: LimitsSettings = field(default_factory=LimitsSettings)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    sqs: SqsSettings = field(default_factory=SqsSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    tls: TlsSettings = field(default_factory=TlsSettings)
    push: PushSettings = field(default_factory=PushSettings)

    def __post_init__(self) -> None:
        require(
            not self.core.seeds() or bool(self.cluster.secret or self.cluster.secret_file),
            "cluster.secret",
            "is required when core.seedserver is set (gossip packets are signed with it)",
        )
        require(
            self.storage.backend != "riak" or bool(self.core.riaknodes),
            "core.riaknodes",
            "must name at least one Riak node (host:8098) when storage.backend is riak",
        )
        require(
            not self.auth.on(self.core.httpaddress)
            or bool(self.auth.adminkey or self.auth.adminkeyfile),
            "auth.adminkey",
            "is required when keys are (auth.enabled is true, or auto and core.httpaddress "
            "is not loopback); to serve without keys write auth.enabled = false",
        )
        address = self.cluster.address or self.core.httpaddress
        require(
            not self.gossip or address not in ("0.0.0.0", "::", ""),
            "cluster.address",
            "must be an address the other nodes can reach (core.httpaddress is a wildcard)",
        )

    @property
    def gossip(self) -> bool:
        """Whether this node gossips (a secret is set)."""
        return bool(self.cluster.secret or self.cluster.secret_file)


SECTIONS: dict[str, type[Any]] = {f.name: f.default_factory for f in dataclasses.fields(Settings)}  # type: ignore[misc]
