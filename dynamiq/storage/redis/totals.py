"""Every message a Redis store holds, counted beside the messages: a counter per hash slot.

A script that adds members to a shard's sorted set, or removes some, adds as
much to the counter of the shard's slot in the same script: one slot, so the
count changes with the messages, and a resharding moves it with them. The
store's total is the sum of the 16,384 counters, read by one script per
server over the slots it holds (``TOTAL``).

The counters count every message only in a store they counted from empty: the
first process that finds the store holding no message marks it so (``MARK``).
A store written by an earlier release has no mark and no total (the stats then
sum their page) until it is emptied. One that an earlier release's node writes
to after it was marked (a rolling upgrade begun on an empty store) counts too
few by what that node stored.
"""

from __future__ import annotations

import functools
from binascii import crc_hqx

__all__ = ["MARK", "SLOTS", "slot_counter", "slot_counters"]

SLOTS = 16384
MARK = "dq:totals"  # set on a store whose counters counted every message from empty


@functools.cache
def _slot_tags() -> tuple[bytes, ...]:
    """A hash tag in each slot: the shortest hex numbers that land there (0.2 s, once)."""
    tags: list[bytes | None] = [None] * SLOTS
    left, n = SLOTS, 0
    while left:
        tag = b"%x" % n
        slot = _slot(tag)
        if tags[slot] is None:
            tags[slot] = tag
            left -= 1
        n += 1
    return tuple(tag for tag in tags if tag is not None)


def _slot(tag: bytes) -> int:
    """The hash slot of a key whose hash tag is ``tag`` (Redis Cluster's CRC16)."""
    return crc_hqx(tag, 0) % SLOTS


def slot_counter(slot: int) -> str:
    """The counter of a slot's messages (a key in that slot)."""
    return f"dq:{{{_slot_tags()[slot].decode()}}}:n"


def slot_counters() -> list[str]:
    """Every slot's counter, by slot."""
    return [slot_counter(slot) for slot in range(SLOTS)]
