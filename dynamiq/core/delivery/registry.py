"""The queues this node has in memory, and the slice of ids it serves.

Every part of the engine that needs a queue's in-memory side (delivery, the
lifecycle, custody, expiry, redrive) reads it here, so none of them calls
back into the service that owns it. A queue's state is made when the queue
is used, and forgotten when the queue goes or when it has been idle a while
holding nothing the store does not (an idle queue costs its record only).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence

from dynamiq.core.clock import Clock
from dynamiq.core.delivery.groups import group_stripe
from dynamiq.core.delivery.rates import Activity
from dynamiq.core.delivery.state import QueueState, Stirred, unseen
from dynamiq.core.delivery.walks import Walks
from dynamiq.core.ids import EPOCH_US, SEQ_BITS, STRIPES, IdGenerator, stripes_within
from dynamiq.keyspace import WHOLE, KeyRange
from dynamiq.models import LocalQueueStats, QueueRecord

__all__ = ["QueueStates"]


class QueueStates:
    """Per queue (by bucket) its state on this node; the slice; fresh ids in it."""

    def __init__(
        self,
        clock: Clock,
        ids: IdGenerator | None = None,
        keyspace: KeyRange | None = WHOLE,
        stirred: Stirred | None = None,
    ) -> None:
        self._clock = clock
        self._stirred = stirred or unseen
        self.ids = ids or IdGenerator(clock.wall_us)
        self._states: dict[str, QueueState] = {}
        self.keyspace: KeyRange | None = None  # the ids this node leases out now
        self.stripes = (0, STRIPES - 1)  # where publishes go: the slice's whole stripes
        self.moves = 0  # keyspace changes so far
        self.walks = Walks()
        self.activity = Activity()  # every queue's publishes, receives, deletes here
        self.set_keyspace(keyspace)

    # -- the slice ------------------------------------------------------------

    def serves(self, message_id: int) -> bool:
        """Whether this node may lease ``message_id`` now."""
        ks = self.keyspace
        return ks is not None and ks[0] <= message_id <= ks[1]

    def set_keyspace(self, keyspace: KeyRange | None) -> None:
        """Serve ``keyspace`` from now on (None: serve nothing); every queue's state
        forgets what it knew of the groups outside it (stale)."""
        if keyspace == self.keyspace:
            return
        self.keyspace, self.moves = keyspace, self.moves + 1
        self.stripes = stripes_within(*keyspace) if keyspace else (0, STRIPES - 1)
        for state in self._states.values():
            state.slice_moved(keyspace, self._clock.now(), self.owns_group)

    def owns_group(self, group: str) -> bool:
        """Whether this node serves a group's messages (those published now)."""
        return self.serves(group_stripe(group) << SEQ_BITS | self.due_seq())

    def due_seq(self, now_us: int | None = None) -> int:
        """The latest seq due now: what the clock has reached, and every id drawn for
        a message due now (a burst draws seqs a little ahead of the clock)."""
        now_us = self._clock.wall_us() if now_us is None else now_us
        return max(now_us - EPOCH_US, self.ids.last_seq)

    def new_ids(self, count: int) -> list[int]:
        """Return ids for messages due now, in this node's slice (moves into a queue)."""
        return self.ids.many(count, self.stripes)

    async def settled(self) -> None:
        """Wait until the receives that began before the slice last moved ended."""
        await self.walks.done_before(self.moves)

    # -- the queues ---------------------------------------------------------------

    def of(self, record: QueueRecord) -> QueueState:
        """Return a queue's state, made on first use, with its record's settings."""
        state = self._states.get(record.uid)
        now = self._clock.now()
        if state is None:
            lo, hi = self.keyspace or WHOLE
            state = self._states[record.uid] = QueueState(record, lo, hi, now, self._stirred)
        elif state.settings is not record.settings:  # (equal ones compare slowly)
            if state.settings != record.settings:
                state.partitions.configure(record.settings, now)
            state.settings = record.settings
        state.used = now
        return state

    def drop_idle(self, idle_seconds: float) -> int:
        """Let go of the states of queues unused for ``idle_seconds`` that hold nothing
        the store does not (``QueueState.quiet``): made again, as new, on next use.
        Returns how many went."""
        cutoff = self._clock.now() - idle_seconds
        idle = [uid for uid, s in self._states.items() if s.used < cutoff and s.quiet()]
        for uid in idle:
            del self._states[uid]
        return len(idle)

    def get(self, uid: str) -> QueueState | None:
        """Return the state of the queue in bucket ``uid``, if this node has one."""
        return self._states.get(uid)

    def among(self, uids: Collection[str]) -> list[str]:
        """Those of the buckets ``uids`` whose queues have a state here."""
        states = self._states
        if len(states) < len(uids):
            return [uid for uid in states if uid in uids]
        return [uid for uid in uids if uid in states]

    def items(self) -> list[tuple[str, QueueState]]:
        """Every ``(bucket, state)`` this node has, as a list (safe across awaits)."""
        return list(self._states.items())

    def local_stats(self, uid: str) -> LocalQueueStats:
        """What only this node knows of the queue in bucket ``uid``: its leases, its
        rates, what it moved on (none of those without a state here but its rates)."""
        rates = self.activity.rates(uid, self._clock.now())
        state = self._states.get(uid)
        return LocalQueueStats(0, *rates) if state is None else state.local_stats(rates)

    def local_totals(self) -> LocalQueueStats:
        """What only this node knows, summed over every queue: leases held and rates."""
        leases = sum(len(state.leases) for state in self._states.values())
        return LocalQueueStats(leases, *self.activity.totals(self._clock.now()))

    def in_use(self) -> dict[str, tuple[int, int]]:
        """Per bucket in use on this node (its state in memory, or events within the
        rates' window): its publishes, receives and deletes of late, its leases held."""
        events = self.activity.recent(self._clock.now())
        out = {uid: (events.get(uid, 0), len(s.leases)) for uid, s in self._states.items()}
        for uid, count in events.items():
            out.setdefault(uid, (count, 0))
        return out

    def busiest(self, by_uid: Callable[[str], QueueRecord | None]) -> list[str]:
        """Return the queues in use on this node, the busiest first: publishes, receives
        and deletes here of late, then leases held, then by name (``by_uid``: a live
        bucket's queue)."""
        ranked = []
        for uid, (events, leases) in self.in_use().items():
            if (record := by_uid(uid)) is not None:
                ranked.append((-events, -leases, record.name))
        return [name for *_, name in sorted(ranked)]

    def all(self) -> list[QueueState]:
        """Every state this node has, as a list (safe across awaits)."""
        return list(self._states.values())

    def arrived(self, uid: str, ids: Sequence[int]) -> None:
        """Note messages stored in bucket ``uid`` elsewhere: walks meet them, polls wake."""
        if (state := self._states.get(uid)) is not None and ids:
            state.published(list(ids))

    def forget(self, uids: Iterable[str]) -> None:
        """Drop the state of the queues whose buckets are ``uids`` (deleted or purged):
        their waiting receives return, and their leases are gone (nothing left to
        journal)."""
        for uid in uids:
            gone = self._states.pop(uid, None)
            if gone is not None:
                gone.forget_leases()
                gone.notify()

    def wake_all(self) -> None:
        """Wake every waiting receive."""
        for state in self._states.values():
            state.notify()
