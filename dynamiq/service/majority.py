"""The right to serve: in touch with a majority of the known members, and no pause since.

A node serves its slice only while it hears from a majority of the members
it knows of (``Quorum``: heartbeats over the peer routes); otherwise its
receives answer 503. A lease it hands out holds only as long as the process
did not stand still meanwhile: others may have served its slice since.
"""

from __future__ import annotations

from collections.abc import Collection

from dynamiq.cluster.base import Membership
from dynamiq.cluster.quorum import Quorum
from dynamiq.errors import NoMajority

__all__ = ["Majority"]


class Majority:
    """Whether this node may serve now, and whether its leases still hold."""

    def __init__(self, membership: Membership, quorum: Quorum | None = None) -> None:
        self._membership = membership
        self.quorum = quorum  # None: a node alone, or workers that count no majority
        self._pauses = 0  # times this process stopped serving what it held so far
        self.leaving = False  # stopping for good (SIGTERM): receives look here only

    def may_serve(self) -> bool:
        """Whether this node is in touch with a majority of the known members."""
        return self.quorum is None or self.quorum.may_serve(self._membership.known())

    def heard(self, member: str) -> None:
        """Note a heartbeat from ``member``."""
        if self.quorum is not None:
            self.quorum.heard(member)

    def fenced(self, members: Collection[str]) -> bool:
        """Whether ``members`` have been silent here for the fence (they stopped leasing)."""
        return self.quorum is None or self.quorum.fenced(members)

    def refusal(self) -> NoMajority:
        """The error a request gets while this node may not serve."""
        known = self._membership.known()
        reached = self.quorum.reached(known) if self.quorum is not None else len(known)
        return NoMajority(reached, len(known))

    def paused(self) -> None:
        """Note that this node stopped serving what it held (a pause, a lost majority,
        leaving): leases made before no longer hold."""
        self._pauses += 1

    def epoch(self) -> int:
        """The pauses noticed so far: leases made since hold while ``holds(epoch)`` does."""
        return self._pauses

    def holds(self, epoch: int) -> bool:
        """Whether leases made since ``epoch()`` returned ``epoch`` are still good: False
        once this process stood still long enough that the others may have served its
        slice and handed the same messages out."""
        return self._pauses == epoch and self._membership.awake() and self.may_serve()
