"""Majority to serve, fenced by time.

Every node sends each known member a heartbeat (an HTTP request over the
peer routes) several times per ``window``. A heartbeat that is answered is
a round trip: both directions work. A node may lease only while, within the
last ``window`` seconds, round trips *started* with enough members that they
and it make a majority of the known members: its right to serve ends
``window`` after the start of the round trip that completes its majority.
Every receive checks the right last thing before its answer is written, and
stops a ``GUARD`` early.

A node takes over the slice of a member gone from its view (no handoff: it
cannot be asked) only once that member has been silent for ``fence()`` at
itself and at every live member it hands off with, who with it make a
majority. Majorities overlap, so the gone member cannot have a majority
whose last round trip is younger than that: its right has ended, and with
it its leasing.

What this rests on:

- **Clock rates**, not clock values: each node measures intervals on its own
  monotonic clock, and the fence (1.5 windows) covers a node whose clock
  runs up to a third slower than another's over a few seconds.
- **No long stall between the last check and the write** of a receive's
  answer: a process stopped for longer than ``GUARD`` plus half a window
  right there (microseconds of work) could still send a lease the majority
  no longer honours.
- **Members known.** A member counts toward the majority from the moment it
  is heard of until it leaves (SIGTERM); one killed for good still counts,
  so a cluster needs a majority of its members up to lease. A configured
  seed never heard from counts too.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Collection

from dynamiq.cluster.base import Member, Membership
from dynamiq.cluster.peers import PeerClient
from dynamiq.errors import PeerUnavailable

__all__ = ["GUARD_SHARE", "Quorum", "heartbeats"]

HEARTBEATS_PER_WINDOW = 4

GUARD_SHARE = 0.25  # a node stops leasing this share of a window before its right ends
FENCE_WINDOWS = 1.5  # a gone member's slice is taken after this many windows of silence


class Quorum:
    """What this node knows of its round trips with the others, and of their heartbeats."""

    def __init__(
        self, name: str, window: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.name = name
        self.window = window
        self._clock = clock
        self._started = clock()  # heard nothing before: as if all had spoken just then
        self._contact: dict[str, float] = {}  # member -> start of its last round trip back
        self._heard: dict[str, float] = {}  # member -> arrival of its last heartbeat here

    def round_trip(self, member: str, started: float) -> None:
        """Note a heartbeat to ``member`` sent at ``started`` and answered."""
        if started > self._contact.get(member, -math.inf):
            self._contact[member] = started

    def heard(self, member: str) -> None:
        """Note a heartbeat from ``member`` arriving now."""
        self._heard[member] = self._clock()

    def right_until(self, known: Collection[str]) -> float:
        """Until when this node may serve (monotonic), given the ``known`` members'
        names (itself among them)."""
        others = [m for m in known if m != self.name]
        needed = (len(others) + 1) // 2  # a majority of all the members, less this node
        if needed <= 0:
            return math.inf
        starts = sorted((self._contact.get(m, -math.inf) for m in others), reverse=True)
        return starts[needed - 1] + self.window

    def may_serve(self, known: Collection[str]) -> bool:
        """Whether this node's right to serve runs for a guard's time more."""
        return self.right_until(known) - self._clock() > self.window * GUARD_SHARE

    def reached(self, known: Collection[str]) -> int:
        """How many of ``known`` (this node included) it had a round trip with lately."""
        since, contact = self._clock() - self.window, self._contact
        return 1 + sum(1 for m in known if m != self.name and contact.get(m, -math.inf) >= since)

    def fence(self) -> float:
        """How long a gone member must have been silent before its slice is taken."""
        return self.window * FENCE_WINDOWS

    def silent(self, member: str) -> float:
        """Seconds since ``member``'s last heartbeat arrived (or this node started)."""
        return self._clock() - max(self._heard.get(member, -math.inf), self._started)

    def fenced(self, members: Collection[str]) -> bool:
        """Whether every one of ``members`` has been silent here for the fence."""
        fence = self.fence()
        return all(self.silent(m) >= fence for m in members)


async def heartbeats(
    quorum: Quorum, membership: Membership, peers: PeerClient, after: Callable[[], None]
) -> None:
    """Send every known member a heartbeat ``HEARTBEATS_PER_WINDOW`` times a window,
    each answered within half a window or not counted; call ``after`` each round."""
    sent: set[asyncio.Task[None]] = set()

    async def beat(member: Member) -> None:
        started = time.monotonic()
        with contextlib.suppress(PeerUnavailable):
            await peers.heartbeat(member, quorum.name, quorum.window / 2)
            quorum.round_trip(member.name, started)

    try:
        while True:
            known = membership.known()
            # A member restarted at another address is heard of twice: the live one.
            states = sorted(membership.states(), key=lambda s: s.alive)
            found = {s.member.name: s.member for s in states}
            for name, member in found.items():
                if name != quorum.name and name in known:
                    task = asyncio.create_task(beat(member))
                    sent.add(task)
                    task.add_done_callback(sent.discard)
            after()
            await asyncio.sleep(quorum.window / HEARTBEATS_PER_WINDOW)
    finally:
        for task in sent:
            task.cancel()
