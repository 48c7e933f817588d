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
lapses stays the head, so it comes back first. When the head goes, the
messages that waited behind it are offered again, and the walk takes the
oldest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from dynamiq.core.ids import stripe_for
from dynamiq.models import Message

__all__ = ["Groups", "group_stripe"]


def group_stripe(group: str) -> int:
    """Return the stripe every message of ``group`` is stored in."""
    return stripe_for(group)


class Groups:
    """The heads of one queue's groups on one node, and who waits behind them."""

    def __init__(self) -> None:
        self._heads: dict[str, int] = {}  # group: its head's id
        self._group_of: dict[int, str] = {}  # head id: its group
        self._waiting: dict[str, set[int]] = {}  # group: ids met behind its head
        self._blocked: set[int] = set()  # every waiting id

    def __contains__(self, message_id: object) -> bool:
        """Whether a message waits behind its group's head (a walk passes it by)."""
        return message_id in self._blocked

    def __bool__(self) -> bool:
        return bool(self._heads)

    def admit(self, messages: Sequence[Message]) -> tuple[list[Message], list[Message]]:
        """Split messages met by a walk, oldest first, into those to hand out and those
        that wait behind their group's head (each group's first becomes its head)."""
        out: list[Message] = []
        held: list[Message] = []
        for m in messages:
            group = m.group
            if group is None:
                out.append(m)
                continue
            head = self._heads.get(group)
            if head is None:
                self._heads[group] = m.id
                self._group_of[m.id] = group
                out.append(m)
            elif head == m.id:
                out.append(m)
            else:
                self._waiting.setdefault(group, set()).add(m.id)
                self._blocked.add(m.id)
                held.append(m)
        return out, held

    def head_of(self, message: Message) -> int | None:
        """Return the head of a message's group, if it has one."""
        return None if message.group is None else self._heads.get(message.group)

    def group_of(self, message_id: int) -> str | None:
        """Return the group a head belongs to, or None for a message that heads none."""
        return self._group_of.get(message_id)

    def lead(self, group: str, message_id: int) -> None:
        """Make a message its group's head (a lease handed over by another node)."""
        self._heads[group] = message_id
        self._group_of[message_id] = group

    def ended(self, ids: Iterable[int]) -> list[int]:
        """Note messages gone (deleted, dead-lettered, expired); return, sorted, the ids
        that waited behind the heads among them: to be offered again."""
        again: list[int] = []
        for message_id in ids:
            group = self._group_of.pop(message_id, None)
            if group is not None and self._heads.get(group) == message_id:
                del self._heads[group]
                waiting = self._waiting.pop(group, set())
                self._blocked.difference_update(waiting)
                again.extend(waiting)
        return sorted(again)

    def clear(self) -> None:
        """Forget every head and every waiting message."""
        self._heads.clear()
        self._group_of.clear()
        self._waiting.clear()
        self._blocked.clear()
