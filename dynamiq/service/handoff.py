"""The slice this node serves, kept in step with the view: let go at once, taken by handoff.

Each live member serves the slice the sorted live names give it, and only
while it is in touch with a majority of the known members (``Majority``).
When the view changes, a node stops serving what it lost at once; what it
gained it serves only after every other live member has handed over its
live leases in that range (a member answers once its own view has let the
range go and gives it to the asker, to whom it announces what it stores
there since), so no message is leased twice while a lease on it is live. A
member gone from the view is not asked: its range is taken once it has been
silent for the quorum's fence at this node and at every member answering the
handoff (it has stopped leasing by then), and the leases its lease journal
names are held until they end. A node paused for longer than the suspect
timeout, or cut off from the majority, stands down (keeping its leases) and
asks for its slice back like a newcomer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence

from dynamiq.cluster.base import Member
from dynamiq.cluster.quorum import heartbeats
from dynamiq.core.custody.handover import Custody
from dynamiq.core.queues import QueueService
from dynamiq.errors import PeerUnavailable, QueueNotFound
from dynamiq.keyspace import KeyRange, intersect
from dynamiq.models import HeldLease
from dynamiq.service.majority import Majority
from dynamiq.service.reach import Reach

__all__ = ["SliceKeeper"]

log = logging.getLogger("dynamiq.service")

# How long a member asked for a range waits for its own view to let it go.
HANDOFF_WAIT_SECONDS = 2.0
HANDOFF_RETRY_SECONDS = 0.1


class SliceKeeper:
    """Serves this node's slice of the view, as far as it may, and hands ranges over."""

    def __init__(
        self, reach: Reach, majority: Majority, queues: QueueService, custody: Custody
    ) -> None:
        self._reach = reach
        self._membership = reach.membership
        self._majority = majority
        self._queues = queues
        self._custody = custody
        # whether the right to serve held at the last look: a node with peers
        # starts without it, so the first majority is news and not a loss
        self._serving = majority.quorum is None
        self._settled = True  # whether the last slice change finished
        self._changed = asyncio.Event()
        self._reconciler: asyncio.Task[None] | None = None
        self._heartbeats: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Follow the view from now on (serving nothing until the first handoff ends)."""
        self._membership.listen(self._on_view)
        client = self._reach.client
        if client is None:
            self._queues.set_keyspace(self._own_slice())
            return
        self._queues.set_keyspace(None)
        self._changed.set()
        self._reconciler = asyncio.create_task(self._reconcile_loop())
        quorum = self._majority.quorum
        if quorum is not None:
            beating = heartbeats(quorum, self._membership, client, self._on_heartbeats)
            self._heartbeats = asyncio.create_task(beating)

    async def leave(self) -> None:
        """Stop serving, let the leases go, and tell the peers (SIGTERM)."""
        self._majority.leaving = True
        # Receives under way answer nothing: their leases may not be journaled before
        # the others replay the journal.
        self._stand_down()
        for task in (self._reconciler, self._heartbeats):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        local = self._membership.local()
        await self._reach.to_all(lambda p, m: p.leave(m, local.name, local.boot))

    def serving(self) -> KeyRange | None:
        """Return the ids this process serves now."""
        return self._queues.keyspace

    async def workers_serving(self) -> dict[str, KeyRange | None]:
        """Return what each live worker of this node serves now, this one included (a
        worker that does not answer serves nothing)."""
        asked = await self._reach.ask_siblings(lambda p, m: p.serving(m))
        return {self._reach.me(): self.serving(), **asked}

    def _stand_down(self) -> int:
        """Serve nothing and keep the leases (in the journal for whoever takes over);
        return how many are held."""
        self._majority.paused()
        self._queues.set_keyspace(None)
        return self._custody.stand_down()

    def _own_slice(self) -> KeyRange:
        return self._membership.slice_of(self._reach.me())

    def _on_view(self, members: list[Member], stalled: bool) -> None:
        if stalled:
            # Paused past the suspect timeout: the others may have served this
            # slice and leased its messages; ours are void.
            held = self._stand_down()
            log.warning("paused: serving nothing until the slice is handed back (%d leases)", held)
        self._changed.set()

    def _on_heartbeats(self) -> None:
        """Stand down when the right to serve ran out; ask for the slice when it is back,
        or again when the last slice change could not finish."""
        serving = self._majority.may_serve()
        if serving == self._serving:
            if not self._settled and not self._changed.is_set():
                self._changed.set()
            return
        self._serving = serving
        if not serving:
            held = self._stand_down()  # receives under way answer nothing
            refusal = self._majority.refusal().message
            log.warning("%s: serving nothing (%d leases kept)", refusal, held)
        else:
            log.info("in touch with a majority: asking for the slice")
        self._changed.set()

    async def _reconcile_loop(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            try:
                self._settled = await self._reconcile()
            except Exception:  # never let the slice go unmanaged
                log.exception("slice change failed; retrying")
                await asyncio.sleep(HANDOFF_RETRY_SECONDS)
                self._changed.set()

    async def _reconcile(self) -> bool:
        """Serve this node's slice of the view, as far as it may now; False when that
        is not all of it yet (the heartbeats try again)."""
        if not self._majority.may_serve():
            self._queues.set_keyspace(None)
            return False
        target = self._own_slice()
        current = self._queues.keyspace
        kept = intersect(current, target)
        self._queues.set_keyspace(kept)  # stop serving what was lost, now
        if kept != current:
            log.info("let go of a part of the slice: serving %s now", kept or "nothing")
        if kept == target:
            return True
        live, known = {m.name for m in self._membership.members()}, self._membership.known()
        gone = sorted(known - live)
        if len(live) <= len(known) // 2:
            return False  # the view lags the heartbeats: no majority to confirm with
        if not await self._fenced(gone):
            return False
        # Members gone without a handoff left their lease journals: their counts, and
        # the leases in this slice that consumers may still hold.
        await self._custody.replay(live, target)
        peers = self._reach.peers()
        results = await asyncio.gather(*(self._take_over(m, target, gone) for m in peers))
        if all(results) and not self._changed.is_set() and self._majority.may_serve():
            self._queues.set_keyspace(target)
            log.info("serving slice [%d, %d] of %d members", *target, len(peers) + 1)
            return True
        return False

    async def _fenced(self, gone: list[str]) -> bool:
        """Wait until the members ``gone`` from the view have been silent here for the
        fence; False when the view changed meanwhile."""
        while not self._majority.fenced(gone):
            if self._changed.is_set():
                return False
            await asyncio.sleep(HANDOFF_RETRY_SECONDS)
        return True

    async def _take_over(self, member: Member, target: KeyRange, gone: list[str]) -> bool:
        """Import ``member``'s leases in ``target`` once it let the range go (and has
        not heard from the members ``gone`` for the fence).

        False when the view changed meanwhile (the caller starts over). A live
        member whose view disagrees is asked again until it agrees or the view
        changes: serving a range without its word could lease twice.
        """
        client = self._reach.client
        assert client is not None  # only a node with peers takes ranges over
        (lo, hi), name = target, self._reach.me()
        while not self._changed.is_set():
            try:
                leases = await client.handoff(member, lo, hi, name, gone)
            except PeerUnavailable as exc:
                log.debug("handoff from %s: %s", member.name, exc)
                leases = None
            if leases is not None:
                for queue, held in leases.items():
                    # A queue this node does not know: deleted meanwhile, or
                    # created a moment ago (its leases are not kept then).
                    with contextlib.suppress(QueueNotFound):
                        self._custody.take_over(queue, held)
                return True
            await asyncio.sleep(HANDOFF_RETRY_SECONDS)
        return False

    async def hand_over(
        self, lo: int, hi: int, owner: str, gone: Sequence[str] = ()
    ) -> dict[str, list[HeldLease]] | None:
        """Answer a handoff: the live leases in ``[lo, hi]`` once this node serves none
        of it, its own view gives the range to ``owner``, and the members ``gone``
        from the owner's view have been silent here for the fence.

        The second condition closes a window for ordered groups: from the answer
        on, a message this node stores in the range is announced to ``owner``,
        and one announced elsewhere before was stored before ``owner`` walks the
        range at all. The third makes sure a gone member stopped leasing. None
        when the views still disagree after a short wait (they converge within a
        gossip round or two).
        """
        deadline = time.monotonic() + HANDOFF_WAIT_SECONDS
        while not self._lets_go(lo, hi, owner, gone):
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(0.02)
        leases = await self._custody.export(lo, hi)
        return leases if self._lets_go(lo, hi, owner, gone) else None  # else the view moved on

    def _lets_go(self, lo: int, hi: int, owner: str, gone: Sequence[str] = ()) -> bool:
        """Whether this node serves none of ``[lo, hi]``, its view gives it to ``owner``,
        and the members ``gone`` have been silent here for the fence."""
        if intersect(self._queues.keyspace, (lo, hi)) is not None:
            return False
        if not self._majority.fenced(gone):
            return False
        if owner not in {m.name for m in self._membership.members()}:
            return False
        first, last = self._membership.slice_of(owner)
        return first <= lo and hi <= last
