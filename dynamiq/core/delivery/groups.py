"""Ordered groups: a group's messages are delivered in order, a batch at a time (pure).

Every message of a group is stored in one stripe, chosen by a hash of the
group's name (``group_stripe``). A stripe lies in one partition, walked by one
receive at a time in id order, and ids inside a stripe are in the order the
messages are due (published, plus any delay); so the node that serves the
stripe owns the group, and its walk meets the group's messages in order. A
message published through another node is announced to the owner before
its publish is answered (a walk would meet it only at its next fresh
start, after a later message published through the owner itself).

``Groups`` keeps, per queue on that node, each group's front: the messages
handed out and not yet deleted, dead-lettered or expired, oldest first. A
receive that finds a group with no front hands out as many of its messages
as it takes, in order (SQS hands out up to ``MaxNumberOfMessages`` of one
group); they are the front then, and the group's other messages wait (not
leased, not handed out) until the whole front is gone. A front member whose
lease lapses stays in the front: the front comes back first, in order, once
none of it is in flight. The group also remembers every message a walk met
behind the front and that is not gone: when the front goes, the oldest of
them becomes the front at once (in a stripe, id order is age order), and
those that waited are offered again, so the next walk hands them out in
order. A front is never started by which message a walk happens to meet
first: a walk that takes only a few, or that passed a message by while it
waited and reads on after the front went, would otherwise hand out a later
message of the group first. A lease taken over from another node (a
handoff, a lease journal) joins its group's front: the message was handed
out; if it is gone already, the read that follows its lapse finds that.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Container, Iterable, Sequence

from dynamiq.core.ids import stripe_for
from dynamiq.models import Message

__all__ = ["Groups", "group_stripe"]


def group_stripe(group: str) -> int:
    """Return the stripe every message of ``group`` is stored in."""
    return stripe_for(group)


class Groups:
    """The fronts of one queue's groups on one node, and what they know is behind them."""

    def __init__(self) -> None:
        self._fronts: dict[str, list[int]] = {}  # group: its front's ids, ascending
        self._group_of: dict[int, str] = {}  # front id: its group
        # Per group, the ids met behind its front and not gone (each id's group in
        # ``_behind_of``); ``_blocked`` holds those a walk passes by now: the ones
        # met since the front last changed. The others were offered again.
        self._behind: dict[str, set[int]] = {}
        self._behind_of: dict[int, str] = {}
        self._blocked: set[int] = set()
        # Fronts chosen when the one before went, not handed out yet (one message
        # each): an older message of the group met before they are takes their place.
        self._unsent: set[int] = set()
        # Front members whose leases another node made (a handoff, a lease journal,
        # which keeps a lease until it would have ended, deleted or not).
        self._foreign: set[int] = set()

    def __contains__(self, message_id: object) -> bool:
        """Whether a message waits behind its group's front (a walk passes it by)."""
        return message_id in self._blocked

    def __bool__(self) -> bool:
        return bool(self._fronts)

    def admit(
        self, messages: Sequence[Message], leased: Container[int]
    ) -> tuple[list[Message], list[Message]]:
        """Split messages met by a walk, oldest first (each ``leased`` by it), into those
        to hand out and those that wait.

        A group's front goes out again, in order, when none of it is
        ``leased`` by an earlier receive; once all of it is out in this walk,
        or the group had none, the group's next messages met join it.
        """
        out: list[Message] = []
        held: list[Message] = []
        handed: dict[str, int] = {}  # group: how many of its front this walk hands out
        walked: set[int] | None = None
        for m in messages:
            group = m.group
            if group is None:
                out.append(m)
                continue
            front = self._fronts.get(group)
            n = handed.get(group, 0)
            if front is None:
                self._lead(group, m.id)
            elif n < len(front):
                if n == 0 and len(front) == 1 and front[0] in self._unsent and m.id < front[0]:
                    self._displace(group, m.id)  # older than the front chosen: it leads
                elif front[n] != m.id:
                    self._hold(group, m, held)
                    continue
                elif n == 0:
                    if walked is None:
                        walked = {x.id for x in messages}
                    if any(h in leased and h not in walked for h in front):
                        held.append(m)  # the group is in flight: its front waits
                        continue
                    self._unsent.discard(m.id)
            elif self._next_behind(group, m.id):
                self._join(group, m.id)
            else:
                self._hold(group, m, held)
                continue
            self._foreign.discard(m.id)  # leased here now
            handed[group] = n + 1
            out.append(m)
        return out, held

    def _next_behind(self, group: str, message_id: int) -> bool:
        """Whether no message met behind a group's front is older than ``message_id``."""
        behind = self._behind.get(group)
        return not behind or message_id <= min(behind)

    def _hold(self, group: str, m: Message, held: list[Message]) -> None:
        held.append(m)
        if self._group_of.get(m.id) != group:  # not a front member waiting its turn
            self._wait_behind(group, m.id)

    def _wait_behind(self, group: str, message_id: int) -> None:
        """Note a message met behind its group's front: walks pass it by."""
        self._behind.setdefault(group, set()).add(message_id)
        self._behind_of[message_id] = group
        self._blocked.add(message_id)

    def front_of(self, message: Message) -> Sequence[int]:
        """Return the front of a message's group (empty if it has none)."""
        return () if message.group is None else self._fronts.get(message.group, ())

    def foreign(self, message_id: int) -> bool:
        """Whether a front member's lease was made by another node (its message may be
        gone already: a lease journal keeps a lease until it would have ended)."""
        return message_id in self._foreign

    def group_of(self, message_id: int) -> str | None:
        """Return the group of a front member, or None for a message in no front."""
        return self._group_of.get(message_id)

    def _lead(self, group: str, message_id: int) -> None:
        """Make a message its group's front (the oldest behind the last)."""
        self._forget_behind(message_id)
        self._fronts[group] = [message_id]
        self._group_of[message_id] = group

    def _join(self, group: str, message_id: int) -> None:
        self._forget_behind(message_id)
        bisect.insort(self._fronts[group], message_id)
        self._group_of[message_id] = group

    def _displace(self, group: str, message_id: int) -> None:
        """Lead a group with ``message_id`` instead of its unsent front, which waits."""
        (unsent,) = self._fronts[group]
        self._unsent.discard(unsent)
        del self._group_of[unsent]
        self._lead(group, message_id)
        self._wait_behind(group, unsent)

    def taken_over(self, group: str, message_id: int) -> None:
        """Note a lease on a message of ``group`` that another node made (a handoff, or
        its lease journal): the message joins its group's front. A front chosen
        here and not handed out yet was passed over there: it is dropped."""
        front = self._fronts.get(group)
        self._foreign.add(message_id)
        if front is None:
            self._lead(group, message_id)
        elif message_id not in front:
            for head in [h for h in front if h in self._unsent and h < message_id]:
                front.remove(head)
                self._unsent.discard(head)
                del self._group_of[head]
            self._join(group, message_id)

    def ended(self, ids: Iterable[int]) -> list[int]:
        """Note messages gone (deleted, dead-lettered, expired); return, sorted, the ids
        that waited behind the fronts they emptied: to be offered again."""
        again: list[int] = []
        for message_id in ids:
            group = self._group_of.pop(message_id, None)
            if group is None:
                self._forget_behind(message_id)
                continue
            self._unsent.discard(message_id)
            self._foreign.discard(message_id)
            front = self._fronts[group]
            front.remove(message_id)
            if not front:
                del self._fronts[group]
                again.extend(self._next_front(group))
        return sorted(again)

    def lapsed(self, ids: Iterable[int], leased: Container[int]) -> list[int]:
        """Note leases ended without a delete; return, sorted, the ids waiting behind the
        fronts none of which is ``leased`` now: to be offered again, after their front
        (a walk that meets them first holds them again)."""
        again: list[int] = []
        for group in {g for i in ids if (g := self._group_of.get(i)) is not None}:
            if not any(h in leased for h in self._fronts[group]):
                again.extend(self._unblock(group))
        return sorted(again)

    def _unblock(self, group: str) -> list[int]:
        """Let walks meet again the messages waiting behind a group's front; return them."""
        waited = [mid for mid in self._behind.get(group, ()) if mid in self._blocked]
        self._blocked.difference_update(waited)
        return waited

    def _next_front(self, group: str) -> list[int]:
        """Make the oldest message behind a group's gone front its front; return those
        that waited (the walks passed them by): to be offered again."""
        behind = self._behind.get(group)
        if not behind:
            return []
        waited = self._unblock(group)
        head = min(behind)
        self._lead(group, head)
        self._unsent.add(head)
        return waited

    def _forget_behind(self, message_id: int) -> None:
        group = self._behind_of.pop(message_id, None)
        if group is None:
            return
        self._blocked.discard(message_id)
        behind = self._behind[group]
        behind.discard(message_id)
        if not behind:
            del self._behind[group]

    def forget(self, owned: Callable[[str], bool], leased: Container[int]) -> None:
        """Forget the groups not ``owned`` (their owner is another node now, and what
        this one knew of them would be stale if they came back to it), but for their
        front members ``leased`` here: a handoff tells the new owner of them."""
        for group in [g for g in self._fronts if not owned(g)]:
            front = self._fronts[group]
            for head in [h for h in front if h not in leased]:
                front.remove(head)
                del self._group_of[head]
                self._unsent.discard(head)
                self._foreign.discard(head)
            if not front:
                del self._fronts[group]
        for group in [g for g in self._behind if not owned(g)]:
            for message_id in self._behind.pop(group):
                del self._behind_of[message_id]
                self._blocked.discard(message_id)

    def clear(self) -> None:
        """Forget every front and every message behind one."""
        self._fronts.clear()
        self._group_of.clear()
        self._behind.clear()
        self._behind_of.clear()
        self._blocked.clear()
        self._unsent.clear()
        self._foreign.clear()
