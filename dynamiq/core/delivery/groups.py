"""Ordered groups: a group's messages are delivered one at a time, in order (pure).

Every message of a group is stored in one stripe, chosen by a hash of the
group's name (``group_stripe``). A stripe lies in one partition, walked by one
receive at a time in id order, and ids inside a stripe are in the order the
messages are due (published, plus any delay); so the node that serves the
stripe owns the group, and its walk meets the group's messages in order. A
message published through another node is announced to the owner before
its publish is answered (a walk would meet it only at its next fresh
start, after a later message published through the owner itself).

``Groups`` keeps, per queue on that node, each group's head: the message
handed out and not yet deleted, dead-lettered or expired. While a group has a
head, its other messages wait (not leased, not handed out); a head whose lease
lapses stays the head, so it comes back first. It also remembers every message
of the group a walk met behind the head and that is not gone: when the head
goes, the oldest of them becomes the head at once (in a stripe, id order is
age order), and those that waited are offered again, so the next walk hands
out the new head and holds the rest again. A head is never chosen by which
message a walk happens to meet first: a walk that takes only a few, or that
passed a message by while it waited and reads on after the head went, would
otherwise hand out a later message of the group first. A lease taken over
from another node (a handoff, a lease journal) heads its group unless a
newer head is known: of two messages of a group leased one after the other,
the older was gone before the newer went out.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence

from dynamiq.core.ids import stripe_for
from dynamiq.models import Message

__all__ = ["Groups", "group_stripe"]


def group_stripe(group: str) -> int:
    """Return the stripe every message of ``group`` is stored in."""
    return stripe_for(group)


class Groups:
    """The heads of one queue's groups on one node, and what they know is behind them."""

    def __init__(self) -> None:
        self._heads: dict[str, int] = {}  # group: its head's id
        self._group_of: dict[int, str] = {}  # head id: its group
        # Per group, the ids met behind its head and not gone (each id's group in
        # ``_behind_of``); ``_blocked`` holds those a walk passes by now: the ones
        # met since the head last changed. The others were offered again.
        self._behind: dict[str, set[int]] = {}
        self._behind_of: dict[int, str] = {}
        self._blocked: set[int] = set()
        # Heads chosen when the one before went, not handed out yet: an older
        # message of the group met before they are takes their place.
        self._unsent: set[int] = set()

    def __contains__(self, message_id: object) -> bool:
        """Whether a message waits behind its group's head (a walk passes it by)."""
        return message_id in self._blocked

    def __bool__(self) -> bool:
        return bool(self._heads)

    def admit(self, messages: Sequence[Message]) -> tuple[list[Message], list[Message]]:
        """Split messages met by a walk, oldest first, into those to hand out and those
        that wait behind their group's head (a group without one has nothing behind
        it either: its first becomes its head)."""
        out: list[Message] = []
        held: list[Message] = []
        for m in messages:
            group = m.group
            if group is None:
                out.append(m)
                continue
            head = self._heads.get(group)
            if head == m.id:
                self._unsent.discard(head)
                out.append(m)
            elif head is None or (head in self._unsent and m.id < head):
                if head is not None:
                    self._unsent.discard(head)
                    del self._group_of[head]
                    self._hold(group, head)
                self.lead(group, m.id)
                out.append(m)
            else:
                self._hold(group, m.id)
                held.append(m)
        return out, held

    def _hold(self, group: str, message_id: int) -> None:
        self._behind.setdefault(group, set()).add(message_id)
        self._behind_of[message_id] = group
        self._blocked.add(message_id)

    def head_of(self, message: Message) -> int | None:
        """Return the head of a message's group, if it has one."""
        return None if message.group is None else self._heads.get(message.group)

    def group_of(self, message_id: int) -> str | None:
        """Return the group a head belongs to, or None for a message that heads none."""
        return self._group_of.get(message_id)

    def lead(self, group: str, message_id: int) -> None:
        """Make a message its group's head (the oldest behind the last)."""
        self._forget_behind(message_id)
        self._heads[group] = message_id
        self._group_of[message_id] = group

    def taken_over(self, group: str, message_id: int) -> None:
        """Note a lease on a message of ``group`` that another node made (a handoff, or
        its lease journal): the message heads its group, unless this node knows a
        newer head. A group's messages go out in id order, so of two leases on it
        the older is stale: that message was deleted before the newer went out
        (a journal keeps a lease until it would have ended, deleted or not)."""
        head = self._heads.get(group)
        if head is not None:
            if head >= message_id:
                return
            del self._group_of[head]
            self._unsent.discard(head)
        self.lead(group, message_id)

    def ended(self, ids: Iterable[int]) -> list[int]:
        """Note messages gone (deleted, dead-lettered, expired); return, sorted, the ids
        that waited behind the heads among them: to be offered again."""
        again: list[int] = []
        for message_id in ids:
            group = self._group_of.pop(message_id, None)
            if group is not None and self._heads.get(group) == message_id:
                del self._heads[group]
                self._unsent.discard(message_id)
                again.extend(self._next_head(group))
            else:
                self._forget_behind(message_id)
        return sorted(again)

    def _next_head(self, group: str) -> list[int]:
        """Make the oldest message behind a group's gone head its head; return those
        that waited (the walks passed them by): to be offered again."""
        behind = self._behind.get(group)
        if not behind:
            return []
        waited = [mid for mid in behind if mid in self._blocked]
        self._blocked.difference_update(waited)
        head = min(behind)
        self.lead(group, head)
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
        heads ``leased`` here: a handoff tells the new owner of them."""
        for group in [g for g, h in self._heads.items() if not owned(g) and h not in leased]:
            head = self._heads.pop(group)
            self._group_of.pop(head, None)
            self._unsent.discard(head)
        for group in [g for g in self._behind if not owned(g)]:
            for message_id in self._behind.pop(group):
                del self._behind_of[message_id]
                self._blocked.discard(message_id)

    def clear(self) -> None:
        """Forget every head and every message behind one."""
        self._heads.clear()
        self._group_of.clear()
        self._behind.clear()
        self._behind_of.clear()
        self._blocked.clear()
        self._unsent.clear()
