"""Custody of leases across nodes: handed over, taken over, kept through a pause, replayed.

A lease is a promise to a consumer that no one else gets the message until
it ends. When a slice changes hands the promise must go with it:

- in a handoff, the member letting a range go exports its live leases there
  and the new owner takes them over (``export``, ``take_over``);
- a member that cannot be asked (killed, cut off, paused) left them in its
  lease journal: the node taking over its slice holds the live ones the
  journal names (``replay``), and a restarted node those of its past life;
- a node that stands down (a pause, lost contact with the majority,
  SIGTERM) keeps its leases: consumers still hold them, and they stay in its
  journal for whoever takes over.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from dynamiq.core.context import EngineContext
from dynamiq.core.custody.journal import LeaseJournal, Noted, Replayed
from dynamiq.core.delivery.registry import QueueStates
from dynamiq.keyspace import KeyRange
from dynamiq.models import HeldLease, QueueRecord

__all__ = ["Custody"]

log = logging.getLogger("dynamiq.core")


class Custody:
    """The leases this node answers for to the others."""

    def __init__(
        self, context: EngineContext, journal: LeaseJournal | None, states: QueueStates
    ) -> None:
        self._store, self._catalog, self._clock = context
        self._journal = journal
        self._states = states

    async def export(self, lo: int, hi: int) -> dict[str, list[HeldLease]]:
        """Return the live leases on ids in ``[lo, hi]``, per queue, once the receives
        that started before the slice last moved ended."""
        await self._states.settled()
        now = self._clock.now()
        held = {state.name: state.held_leases(lo, hi, now) for state in self._states.all()}
        return {name: leases for name, leases in held.items() if leases}

    def take_over(self, queue: str, leases: Sequence[HeldLease]) -> None:
        """Hold ids leased by another node until their lease would end there."""
        self._take_over(self._catalog.queue(queue), leases)

    def _take_over(self, record: QueueRecord, leases: Sequence[HeldLease]) -> None:
        state = self._states.of(record)
        state.take_over(leases, self._clock.now())
        if log.isEnabledFor(logging.DEBUG):
            heads = [(lease.group, lease.id) for lease in leases if lease.group is not None]
            log.debug("%s: took over %d leases, group heads %s", record.name, len(leases), heads)
        if self._journal is not None:  # this node answers for them now
            self._journal.note(record.uid, state, [lease.id for lease in leases])

    def stand_down(self) -> int:
        """Keep every lease but walk afresh when serving again (others may have served
        the slice meanwhile); return how many leases are held."""
        if self._journal is not None:
            self._journal.restart()
        return sum(state.stand_down() for state in self._states.all())

    async def replay(
        self, alive: Iterable[str] | None = None, within: KeyRange | None = None
    ) -> Replayed:
        """Replay lease journals: this node's own of a previous life (at start, ``alive``
        None), or those of the nodes not ``alive`` (names) before this node serves
        their slice. Store the receive counts they hold, and hold their live leases
        on ids ``within`` the range to serve (all, for this node's own)."""
        if self._journal is None:
            return Replayed()
        if alive is None:
            found = await self._journal.replay_own(self._store)
        else:
            found = await self._journal.replay_others(self._store, alive)
        now_ms = self._clock.wall_ms()
        for uid, noted in found.leases.items():
            record = self._catalog.index.by_uid(uid)
            leases = [_held(n, now_ms) for n in noted if within is None or _in(n.id, within)]
            if record is not None and leases:  # a queue gone meanwhile holds nothing
                self._take_over(record, leases)
        return found


def _held(noted: Noted, now_ms: int) -> HeldLease:
    return HeldLease(
        noted.id, (noted.until_ms - now_ms) / 1000, noted.count, noted.first_ms, noted.group
    )


def _in(message_id: int, within: KeyRange) -> bool:
    return within[0] <= message_id <= within[1]
