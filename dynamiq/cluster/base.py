"""The membership port: who is in the cluster, and which slice each member serves."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from dynamiq.cluster.slices import slices

__all__ = ["Member", "MemberState", "Membership", "StaticMembership", "ViewListener"]


@dataclass(frozen=True, slots=True)
class Member:
    """A node as the others see it."""

    name: str
    host: str
    http: str  # base URL of its HTTP API
    boot: str = ""  # random per process start: tells a restarted node from its past self


@dataclass(frozen=True, slots=True)
class MemberState:
    """A member and its gossip state: online, suspect, offline or left."""

    member: Member
    state: str


# Called with the live members (sorted by name) whenever they change, and with
# ``stalled`` when this process was paused long enough for others to take over.
ViewListener = Callable[[list[Member], bool], None]


class Membership(Protocol):
    """The live members; the gossip adapter keeps it current."""

    def local(self) -> Member:
        """Return this node."""
        ...

    def members(self) -> list[Member]:
        """Return the live members, sorted by name (this node included)."""
        ...

    def slice_of(self, name: str) -> tuple[int, int]:
        """Return the slice ``(lo, hi)`` a live member serves, inclusive."""
        ...

    def states(self) -> list[MemberState]:
        """Return every member heard of, live or not, with its state."""
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

    def advertise(self, http: str) -> None:
        """Set this node's HTTP URL once it listens (the port may be chosen by the OS)."""
        self._local = Member(self._local.name, self._local.host, http)

    def local(self) -> Member:
        """Return this node."""
        return self._local

    def members(self) -> list[Member]:
        """Return this node only."""
        return [self._local]

    def slice_of(self, name: str) -> tuple[int, int]:
        """Return the slice of ``name`` among the live members."""
        return slices(m.name for m in self.members())[name]

    def states(self) -> list[MemberState]:
        """Return this node, online."""
        return [MemberState(self._local, "online")]

    def listen(self, listener: ViewListener) -> None:
        """Nothing ever changes: a node alone."""

    def depart(self, name: str, boot: str) -> None:
        """No one else is here to leave."""
