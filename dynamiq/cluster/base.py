"""The membership port: who is in the cluster, and which slice each member serves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from dynamiq.errors import DynamiqError
from dynamiq.keyspace import KeyRange, slices

__all__ = [
    "OLDEST_PROTOCOL",
    "PROTOCOL",
    "FatalHandler",
    "Member",
    "MemberState",
    "Membership",
    "StaticMembership",
    "ViewListener",
    "protocol_of",
    "speaks_with",
]


# What the members of a cluster say to each other, by version: bumped whenever a
# peer call's body changes (2: messages carry their deduplication id, trace header
# and attribute types; 3: a catalog change says what it wrote, and the peers read
# only that again). Said in gossip and in every peer call; a release from
# before versions were said speaks 1. Bodies only ever grow at their ends and
# each side reads what it knows of them, so a release speaks with every protocol
# from OLDEST_PROTOCOL on: a rolling upgrade mixes the two releases for a while
# (a message passing through an older member loses what that one does not know).
# A newer member is taken at its word: it knows whether it can speak with this one.
PROTOCOL = 3
OLDEST_PROTOCOL = 1


def speaks_with(protocol: int) -> bool:
    """Whether this release can take part in a cluster with a member of ``protocol``."""
    return protocol >= OLDEST_PROTOCOL


def protocol_of(said: str | bytes | None) -> int:
    """The protocol a member said it speaks (in a header, or its gossip metadata)."""
    if not said:
        return 1
    try:
        return int(said)
    except ValueError:
        return 0  # nothing this node speaks


@dataclass(frozen=True, slots=True)
class Member:
    """A node as the others see it."""

    name: str
    host: str
    http: str  # base URL of its HTTP API
    boot: str = ""  # random per process start: tells a restarted node from its past self
    protocol: int = PROTOCOL  # the cluster protocol it speaks


@dataclass(frozen=True, slots=True)
class MemberState:
    """A member and its gossip state: online, suspect, offline or left."""

    member: Member
    state: str

    @property
    def alive(self) -> bool:
        """Whether gossip still hears of it (online, or suspect and not given up yet)."""
        return self.state in ("online", "suspect")


# Called with the live members (sorted by name) whenever they change, and with
# ``stalled`` when this process was paused long enough for others to take over.
ViewListener = Callable[[list[Member], bool], None]

# Called when this node cannot go on in the cluster (a twin showed up, gossip died).
FatalHandler = Callable[[DynamiqError], None]


class Membership(Protocol):
    """The live members; the gossip adapter keeps it current."""

    async def start(self, on_fatal: FatalHandler) -> None:
        """Join the cluster; later, ``on_fatal`` hears why this node must stop.

        Raises:
            ConfigError: this node cannot join as configured (port taken, name in use).
        """
        ...

    async def stop(self) -> None:
        """Leave the cluster (the others see this node go); idempotent."""
        ...

    @property
    def address(self) -> str:
        """Return this node's gossip address (``host:port`` once started), empty without gossip."""
        ...

    def local(self) -> Member:
        """Return this node."""
        ...

    def members(self) -> list[Member]:
        """Return the live members, sorted by name (this node included)."""
        ...

    def slice_of(self, name: str) -> KeyRange:
        """Return the slice ``(lo, hi)`` a live member serves, inclusive."""
        ...

    def awake(self) -> bool:
        """Whether this node's view is current: False after this process was paused
        (the others may have served its slice) until its listeners heard of it."""
        ...

    def states(self) -> list[MemberState]:
        """Return every member heard of, live or not, with its state."""
        ...

    def known(self) -> frozenset[str]:
        """Return the members a majority is counted among: every one heard of that has
        not left (this node included), and each seed not heard from yet (by address)."""
        ...

    def listen(self, listener: ViewListener) -> None:
        """Call ``listener`` whenever the live members change."""
        ...

    def depart(self, name: str, boot: str) -> None:
        """Take a member's word that it is leaving."""
        ...


class StaticMembership:
    """A node alone: it serves the whole keyspace."""

    def __init__(self, local: Member) -> None:
        self._local = local

    async def start(self, on_fatal: FatalHandler) -> None:
        """Nothing to join."""

    async def stop(self) -> None:
        """Nothing to leave."""

    @property
    def address(self) -> str:
        """No gossip: no address."""
        return ""

    def local(self) -> Member:
        """Return this node."""
        return self._local

    def members(self) -> list[Member]:
        """Return this node only."""
        return [self._local]

    def slice_of(self, name: str) -> KeyRange:
        """Return the slice of ``name`` among the live members."""
        return slices(m.name for m in self.members())[name]

    def awake(self) -> bool:
        """A node alone: no one else serves its slice."""
        return True

    def states(self) -> list[MemberState]:
        """Return this node, online."""
        return [MemberState(self._local, "online")]

    def known(self) -> frozenset[str]:
        """Return this node: a majority of one."""
        return frozenset([self._local.name])

    def listen(self, listener: ViewListener) -> None:
        """Nothing ever changes: a node alone."""

    def depart(self, name: str, boot: str) -> None:
        """No one else is here to leave."""
