"""The node in its cluster: which slice it serves, and what it asks its peers.

Each live member serves the slice the sorted live names give it, and only
while it is in touch with a majority of the known members (``Quorum``:
heartbeats over the peer routes; otherwise receives get 503). When the view
changes, a node stops serving what it lost at once; what it gained it
serves only after every other live member has handed over its live leases
in that range (a member answers once its own view has let the range go and
gives it to the asker, to whom it announces what it stores there since), so
no message is leased twice while a lease on it is live. A member gone from
the view is not asked: its range is taken once it has been silent for the
quorum's fence at this node and at every member answering the handoff
(it has stopped leasing by then), and the leases its lease journal names
are held until they end. A node paused for longer than the suspect
timeout, or cut off from the majority, stands down (keeping its leases)
and asks for its slice back like a newcomer.

Receives any node cannot fill from its own slice are filled from its peers'
slices (they lease); lease changes go to the member that serves the id;
catalog changes are announced so peers reload at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from dynamiq.cluster.base import Member, Membership
from dynamiq.cluster.peers import PeerClient
from dynamiq.cluster.quorum import Quorum, heartbeats
from dynamiq.core.janitor import Janitor
from dynamiq.core.queues import QueueService
from dynamiq.errors import BackendUnavailable, NoMajority, PeerUnavailable, QueueNotFound
from dynamiq.keyspace import KeyRange, intersect, node_of
from dynamiq.models import HeldLease, LocalQueueStats, Message, Outgoing, ReceiveRequest
from dynamiq.service.owners import by_owner, quietly, tell_owners

__all__ = ["Coordinator"]

log = logging.getLogger("dynamiq.cluster")

T = TypeVar("T")

# A waiting receive looks at its peers' slices this often.
PEER_POLL_SECONDS = 0.5
# A peer that had no visible message (or did not answer) is not asked again
# by this node for that queue for this long: receives of a queue the peers
# hold nothing of do not pay a round trip to every peer each time. One that
# gave some, if fewer than asked, is asked again by the next receive: an
# ordered group's next message is there as soon as the one before is
# deleted, and a receive takes one per group.
PEER_DRY_SECONDS = 0.25
# A peer whose waiting receive found nothing here is told of the next messages
# stored here for this long: it asks again (and so asks to be told) at least
# every PEER_POLL_SECONDS while it waits.
WATCH_SECONDS = 2 * PEER_POLL_SECONDS
# How long a member asked for a range waits for its own view to let it go.
HANDOFF_WAIT_SECONDS = 2.0
HANDOFF_RETRY_SECONDS = 0.1


class Coordinator:
    """Keeps this node's served slice in step with the view, and reaches the peers."""

    def __init__(
        self,
        membership: Membership,
        queues: QueueService,
        janitor: Janitor,
        peers: PeerClient | None,
        quorum: Quorum | None = None,
    ) -> None:
        self._membership = membership
        self._quorum = quorum
        # whether the right to serve held at the last look: a node with peers
        # starts without it, so the first majority is news and not a loss
        self._serving = quorum is None
        self._settled = True  # whether the last slice change finished
        self._heartbeats: asyncio.Task[None] | None = None
        self._queues = queues
        self._janitor = janitor
        self._peers = peers
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reconciler: asyncio.Task[None] | None = None
        self._announcement: asyncio.Task[None] | None = None  # the last catalog change told
        self._leaving = False
        self._dry: dict[tuple[str, str], float] = {}  # (queue, member) -> ask again after
        # (queue, member) -> the ask under way, resolved with whether it found nothing
        self._asking: dict[tuple[str, str], asyncio.Future[bool]] = {}
        # queue -> the peers waiting on it (their receives found nothing here): until when
        self._watchers: dict[str, dict[str, float]] = {}
        self._pauses = 0  # pauses of this process noticed so far

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        """Follow the view from now on (serving nothing until the first handoff ends)."""
        self._membership.listen(self._on_view)
        if self._peers is None:
            self._queues.set_keyspace(self._own_slice())
            return
        self._queues.set_keyspace(None)
        self._changed.set()
        self._reconciler = asyncio.create_task(self._reconcile_loop())
        if self._quorum is not None:
            beating = heartbeats(self._quorum, self._membership, self._peers, self._on_heartbeats)
            self._heartbeats = asyncio.create_task(beating)

    async def leave(self) -> None:
        """Stop serving, let the leases go, and tell the peers (SIGTERM)."""
        self._leaving = True
        self._pauses += 1  # receives under way answer nothing: their leases may not be
        self._queues.set_keyspace(None)  # journaled before the others replay the journal
        self._queues.custody.stand_down()  # in the journal for whoever takes over
        for task in (self._reconciler, self._heartbeats):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        local = self._membership.local()
        await self._to_peers(lambda p, m: p.leave(m, local.name, local.boot))

    async def close(self) -> None:
        """Wait for the announcements and releases still in flight."""
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, PeerUnavailable):
                await task

    def peers(self) -> list[Member]:
        """Return the other live members."""
        me = self._membership.local().name
        return [m for m in self._membership.members() if m.name != me]

    def siblings(self) -> list[Member]:
        """Return the other live workers of this node (none for a node of one process)."""
        node = node_of(self._membership.local().name)
        return [m for m in self.peers() if node_of(m.name) == node]

    def serving(self) -> KeyRange | None:
        """Return the ids this process serves now."""
        return self._queues.keyspace

    async def workers_serving(self) -> dict[str, KeyRange | None]:
        """Return what each live worker of this node serves now, this one included (a
        worker that does not answer serves nothing)."""
        asked = await self._ask_siblings(lambda p, m: p.serving(m))
        return {self._membership.local().name: self.serving(), **asked}

    async def siblings_metrics(self) -> list[bytes]:
        """Return the other workers' own metrics (those that do not answer are left out)."""
        asked = await self._ask_siblings(lambda p, m: p.metrics(m))
        return [text for text in asked.values() if text is not None]

    async def _ask_siblings(
        self, call: Callable[[PeerClient, Member], Awaitable[T]]
    ) -> dict[str, T | None]:
        """Make ``call`` to every other live worker of this node at once; by name, its
        answer, or None where it did not answer (``PeerUnavailable``)."""
        peers, siblings = self._peers, self.siblings()
        if peers is None or not siblings:
            return {}
        got = await asyncio.gather(*(call(peers, m) for m in siblings), return_exceptions=True)
        return {
            m.name: None if isinstance(result, BaseException) else result
            for m, result in zip(siblings, got, strict=True)
        }

    # -- the served slice ----------------------------------------------------

    def _own_slice(self) -> KeyRange:
        return self._membership.slice_of(self._membership.local().name)

    def _on_view(self, members: list[Member], stalled: bool) -> None:
        if stalled:
            # Paused past the suspect timeout: the others may have served this
            # slice and leased its messages; ours are void.
            self._pauses += 1
            self._queues.set_keyspace(None)
            held = self._queues.custody.stand_down()
            log.warning("paused: serving nothing until the slice is handed back (%d leases)", held)
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
        if not self.may_serve():
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
        lo, hi = target
        live, known = {m.name for m in self._membership.members()}, self._membership.known()
        gone = sorted(known - live)
        if len(live) <= len(known) // 2:
            return False  # the view lags the heartbeats: no majority to confirm with
        if not await self._fenced(gone):
            return False
        # Members gone without a handoff left their lease journals: their counts, and
        # the leases in this slice that consumers may still hold.
        await self._queues.custody.replay(live, target)
        results = await asyncio.gather(*(self._take_over(m, lo, hi, gone) for m in self.peers()))
        if all(results) and not self._changed.is_set() and self.may_serve():
            self._queues.set_keyspace(target)
            log.info("serving slice [%d, %d] of %d members", lo, hi, len(self.peers()) + 1)
            return True
        return False

    async def _fenced(self, gone: list[str]) -> bool:
        """Wait until the members ``gone`` from the view have been silent here for the
        fence; False when the view changed meanwhile."""
        quorum = self._quorum
        while quorum is not None and not quorum.fenced(gone):
            if self._changed.is_set():
                return False
            await asyncio.sleep(HANDOFF_RETRY_SECONDS)
        return True

    async def _take_over(self, member: Member, lo: int, hi: int, gone: list[str]) -> bool:
        """Import ``member``'s leases in ``[lo, hi]`` once it let the range go (and has
        not heard from the members ``gone`` for the fence).

        False when the view changed meanwhile (the caller starts over). A live
        member whose view disagrees is asked again until it agrees or the view
        changes: serving a range without its word could lease twice.
        """
        assert self._peers is not None
        name = self._membership.local().name
        while not self._changed.is_set():
            try:
                leases = await self._peers.handoff(member, lo, hi, name, gone)
            except PeerUnavailable as exc:
                log.debug("handoff from %s: %s", member.name, exc)
                leases = None
            if leases is not None:
                for queue, held in leases.items():
                    # A queue this node does not know: deleted meanwhile, or
                    # created a moment ago (its leases are not kept then).
                    with contextlib.suppress(QueueNotFound):
                        self._queues.custody.take_over(queue, held)
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
        leases = await self._queues.custody.export(lo, hi)
        return leases if self._lets_go(lo, hi, owner, gone) else None  # else the view moved on

    # -- the right to serve --------------------------------------------------

    def may_serve(self) -> bool:
        """Whether this node is in touch with a majority of the known members."""
        return self._quorum is None or self._quorum.may_serve(self._membership.known())

    def heard(self, member: str) -> None:
        """Note a heartbeat from ``member``."""
        if self._quorum is not None:
            self._quorum.heard(member)

    def _no_majority(self) -> NoMajority:
        known = self._membership.known()
        reached = self._quorum.reached(known) if self._quorum is not None else len(known)
        return NoMajority(reached, len(known))

    def _on_heartbeats(self) -> None:
        """Stand down when the right to serve ran out; ask for the slice when it is back,
        or again when the last slice change could not finish."""
        serving = self.may_serve()
        if serving == self._serving:
            if not self._settled and not self._changed.is_set():
                self._changed.set()
            return
        self._serving = serving
        if not serving:
            self._pauses += 1  # receives under way answer nothing
            self._queues.set_keyspace(None)
            held = self._queues.custody.stand_down()
            log.warning("%s: serving nothing (%d leases kept)", self._no_majority().message, held)
        else:
            log.info("in touch with a majority: asking for the slice")
        self._changed.set()

    def _lets_go(self, lo: int, hi: int, owner: str, gone: Sequence[str] = ()) -> bool:
        """Whether this node serves none of ``[lo, hi]``, its view gives it to ``owner``,
        and the members ``gone`` have been silent here for the fence."""
        if intersect(self._queues.keyspace, (lo, hi)) is not None:
            return False
        if self._quorum is not None and not self._quorum.fenced(gone):
            return False
        if owner not in {m.name for m in self._membership.members()}:
            return False
        first, last = self._membership.slice_of(owner)
        return first <= lo and hi <= last

    # -- what peers ask of this node -----------------------------------------

    async def receive_here(
        self, queue: str, max_messages: int, visibility_timeout: float | None, waiter: str = ""
    ) -> list[Message]:
        """Lease from this node's own slice only, without waiting (a peer asks).

        A ``waiter`` (the peer, when its receive waits) that gets nothing is told
        when this node next stores messages of ``queue`` (``news``), for a while.
        """
        got = []
        if self.may_serve():
            got = await self._queues.receive(queue, max_messages, visibility_timeout)
        if not got and waiter:
            self._watchers.setdefault(queue, {})[waiter] = time.monotonic() + WATCH_SECONDS
        return got

    def news(self, queue: str, member: str) -> None:
        """``member`` stored messages of ``queue``, which a receive here waits on: ask it."""
        self._dry.pop((queue, member), None)
        self._queues.peer_news(queue)

    def _tell_watchers(self, queue: str) -> None:
        """Tell the peers waiting on ``queue`` that this node stored some (once each)."""
        watchers = self._watchers.pop(queue, None)
        if watchers and self._peers is not None:
            peers, now, me = self._peers, time.monotonic(), self._membership.local().name
            for member in self.peers():
                if watchers.get(member.name, 0.0) > now:
                    self._spawn(quietly(peers.news(member, queue, me)))

    async def change_visibility_here(
        self, queue: str, ids: Sequence[int], seconds: float
    ) -> list[int]:
        """Change leases this node holds (a peer forwards them)."""
        if seconds > 0 and not self.may_serve():
            raise self._no_majority()  # the majority holds them only as long as agreed
        return await self._queues.change_visibility(queue, ids, seconds)

    def deliveries_here(self, queue: str, ids: Sequence[int]) -> list[int]:
        """Per id, the receive count this node last delivered it with (a peer asks)."""
        return self._queues.deliveries(queue, ids)

    def release(self, queue: str, ids: Sequence[int]) -> None:
        """End the leases on ``ids``: they were deleted through another node."""
        self._queues.release(queue, ids)

    def published_here(self, queue: str, ids: Sequence[int]) -> None:
        """Note ``ids`` stored in this node's slice through another node.

        Raises:
            BackendUnavailable: this node does not serve them now (it is taking the
                slice over, or stood down): whoever does may not meet them in time.
        """
        self._queues.published_elsewhere(queue, ids)
        self._tell_watchers(queue)
        if ids and not self._serves(ids):
            raise BackendUnavailable("stored in a slice this node does not serve now")

    def local_stats(self, queues: Sequence[str]) -> dict[str, LocalQueueStats]:
        """Return what only this node knows of each queue: leases and rates."""
        return self._queues.local_stats(queues)

    # -- requests that reach the peers ---------------------------------------

    def epoch(self) -> int:
        """The pauses of this process noticed so far: leases made since hold while
        ``holds(epoch)`` does."""
        return self._pauses

    def holds(self, epoch: int) -> bool:
        """Whether leases made since ``epoch()`` returned ``epoch`` are still good: False
        once this process stood still long enough that the others may have served its
        slice and handed the same messages out."""
        return self._pauses == epoch and self._membership.awake() and self.may_serve()

    async def receive(self, ask: ReceiveRequest) -> list[Message]:
        """Lease from this node's slice, then from the peers' when that is not enough."""
        queue, want, lease = ask.queue, ask.max_messages, ask.visibility_timeout
        if self._peers is None or self._leaving:
            return await self._queues.receive(queue, want, lease, ask.wait_seconds)
        if not self.may_serve():
            raise self._no_majority()
        deadline, epoch = time.monotonic() + ask.wait_seconds, self._pauses
        # What follows a first look that found nothing starts by waiting: this
        # node's slice was just looked at and the peers just asked (to tell of news).
        first_wait = min(ask.wait_seconds, PEER_POLL_SECONDS) if ask.part == "wait" else 0.0
        got = await self._queues.receive(queue, want, lease, first_wait)
        while True:
            if len(got) < want:
                waits = ask.part == "look" or deadline > time.monotonic()
                got += await self._from_peers(queue, want - len(got), lease, waits)
            left = deadline - time.monotonic()
            if got or left <= 0 or self._leaving:
                # Paused meanwhile (while asking the peers, say): the leases are void.
                # They are not given back: the ids may be leased anew by whoever serves
                # them now, and giving back would end that lease; they lapse instead.
                return got if self.holds(epoch) else []
            got = await self._queues.receive(queue, want, lease, min(left, PEER_POLL_SECONDS))

    async def _from_peers(
        self, queue: str, want: int, visibility_timeout: float | None, waits: bool
    ) -> list[Message]:
        """Lease up to ``want`` from the peers not found dry lately; a receive that
        ``waits`` asks those with none to tell it of their next (``news``)."""
        assert self._peers is not None
        out: list[Message] = []
        now = time.monotonic()
        peers = [m for m in self.peers() if self._dry.get((queue, m.name), 0.0) <= now]
        random.shuffle(peers)
        waiter = self._membership.local().name if waits else ""
        for member in peers:
            out += await self._ask(member, queue, want - len(out), visibility_timeout, waiter)
            if len(out) >= want:
                break
        return out

    async def _ask(
        self,
        member: Member,
        queue: str,
        want: int,
        visibility_timeout: float | None,
        waiter: str,
    ) -> list[Message]:
        """Lease up to ``want`` of ``queue`` from ``member``'s slice.

        A receive that would ask while another ask of the same member for the same
        queue is under way waits for that one's answer, and asks only if it was not
        dry: a burst of receives on a queue the peers hold nothing of asks each peer
        once, not once per receive.
        """
        assert self._peers is not None
        key = (queue, member.name)
        under_way = self._asking.get(key)
        if under_way is not None and await asyncio.shield(under_way):
            return []
        dry = asyncio.get_running_loop().create_future()
        self._asking[key] = dry
        got: list[Message] = []
        answered = False  # cancelled: not dry, those waiting ask themselves
        try:
            got = await self._peers.receive(member, queue, want, visibility_timeout, waiter)
            answered = True
        except PeerUnavailable as exc:
            log.debug("receive from %s: %s", member.name, exc)
            answered = True
        finally:
            dry.set_result(answered and not got)
            if self._asking.get(key) is dry:
                del self._asking[key]
        if not got:
            self._dry[key] = time.monotonic() + PEER_DRY_SECONDS
        else:
            self._dry.pop(key, None)
        return got

    async def change_visibility(self, queue: str, ids: Sequence[int], seconds: float) -> list[int]:
        """Change leases where they are held: by the member serving each id."""
        if self._peers is None:
            return await self._queues.change_visibility(queue, ids, seconds)
        mine, theirs = by_owner(self._membership, ids)
        if mine and seconds > 0 and not self.may_serve():
            raise self._no_majority()
        changed = await self._queues.change_visibility(queue, mine, seconds)
        for member, owned in theirs:
            try:
                changed += await self._peers.change_visibility(member, queue, owned, seconds)
            except PeerUnavailable as exc:
                log.debug("visibility at %s: %s", member.name, exc)
        return changed

    async def still_current(self, queue: str, deliveries: Sequence[tuple[int, int]]) -> list[int]:
        """Of ``(id, receive count)`` deliveries, the ids not delivered again since: the
        member serving each id last delivered it with that count, or never did
        (it restarted since, or does not answer: the delivery is taken as current)."""
        ids = [i for i, _ in deliveries]
        mine, theirs = by_owner(self._membership, ids) if self._peers is not None else (ids, [])
        counts = dict(zip(mine, self._queues.deliveries(queue, mine), strict=True))
        for member, owned in theirs:
            assert self._peers is not None
            try:
                got = await self._peers.deliveries(member, queue, owned)
                counts.update(zip(owned, got, strict=True))
            except PeerUnavailable as exc:
                log.debug("deliveries at %s: %s", member.name, exc)
        return [i for i, count in deliveries if counts.get(i, 0) in (0, count)]

    async def delete(self, queue: str, ids: Sequence[int]) -> list[bool]:
        """Delete from the store; tell the members holding leases on the ids to let them go."""
        existed = await self._queues.delete(queue, ids)
        if self._peers is not None:
            peers = self._peers
            _, theirs = by_owner(
                self._membership, [i for i, ok in zip(ids, existed, strict=True) if ok]
            )
            for member, owned in theirs:
                self._spawn(quietly(peers.release(member, queue, owned)))
        return existed

    async def published(
        self, queue: str, ids: Sequence[int | None], messages: Sequence[bytes | Outgoing]
    ) -> None:
        """Tell the members serving some of ``ids`` (a publish's answer: the id of each
        of ``messages``, None where none was stored) about them, before the publish
        is answered (``tell_owners``).

        Raises:
            BackendUnavailable: a pinned message (an ordered group's, a dedup id's)
                lies in a slice no member could be told of in time.
        """
        if self._peers is not None:
            self._tell_watchers(queue)
            await tell_owners(self._peers, self._membership, queue, ids, messages, self._serves)

    def _serves(self, ids: Sequence[int]) -> bool:
        """Whether this node leases ``ids`` now, with the right to: no other node does,
        and its walks meet what is stored there."""
        serves = self._queues.serves
        return serves(min(ids)) and serves(max(ids)) and self.may_serve()

    async def peer_stats(self, queues: list[str]) -> dict[str, LocalQueueStats]:
        """Sum the peers' own leases in flight and rates per queue (unreachable peers count 0)."""
        return await self._peers.summed_stats(self.peers(), queues) if self._peers else {}

    def announce(self) -> None:
        """Tell the peers the catalog changed (they reload now, not at their next poll)."""
        if self._peers is not None:
            self._announcement = self._spawn(self._to_peers(lambda p, m: p.sync(m)))

    async def tell_peers(self) -> None:
        """Tell the peers the catalog changed; return once every live one reloaded it."""
        self.announce()
        await self.announced()

    async def announced(self) -> None:
        """Return once every live peer has reloaded the catalog after the last change.

        A peer that does not answer reloads at its next poll.
        """
        if self._announcement is not None:
            await asyncio.shield(self._announcement)

    async def catalog_changed(self) -> None:
        """A peer changed the catalog: reload it before answering (drops are the changer's)."""
        await self._janitor.reload()

    async def _to_peers(self, call: Callable[[PeerClient, Member], Awaitable[None]]) -> None:
        """Make ``call`` to every other live member at once; failures are only logged."""
        peers = self._peers
        if peers is None:
            return
        results = await asyncio.gather(
            *(call(peers, m) for m in self.peers()), return_exceptions=True
        )
        for result in results:
            if isinstance(result, Exception):
                log.debug("peer call failed: %s", result)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
