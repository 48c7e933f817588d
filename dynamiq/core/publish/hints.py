"""Expiry hints: where a message with a time to live is to be looked at when it is due.

A hint lives in the expiry index, one bucket for every queue
(``EXPIRY_INDEX``). Its key is the message's stripe and its expiry time, so
the hints due in a node's slice are the first keys of each stripe; its value
is the message's id and its queue's bucket. A hint only says where to look:
the message's record decides (``lifecycle.expiry``).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Sequence
from typing import NamedTuple

from dynamiq.core.ids import EPOCH_US, SEQ_BITS, seq_of, stripe_of
from dynamiq.core.publish.attempts import placed
from dynamiq.storage.base import StorageBackend

__all__ = ["EXPIRY_INDEX", "HINT_ID", "Hint", "hint_rows", "store_hints"]

log = logging.getLogger("dynamiq.core")

# Not a queue's bucket: those are named by 16 hex digits.
EXPIRY_INDEX = "expiry-index"
HINT_ID = struct.Struct(">q")  # a hint's value: the message's id, then its bucket


class Hint(NamedTuple):
    """A stored message that expires: its queue's bucket, its id, when (wall ms)."""

    bucket: str
    id: int
    expires_ms: int


def hint_rows(hints: Sequence[Hint], bump: int = 0) -> list[tuple[str, int, bytes]]:
    """Return the expiry-index rows of ``hints``: keyed by stripe and expiry time.

    The microseconds of the key are those of the message's id (plus ``bump``),
    so the messages of one batch, which share a stripe and an expiry
    millisecond, get keys of their own.
    """
    return [
        (
            EXPIRY_INDEX,
            stripe_of(h.id) << SEQ_BITS
            | (h.expires_ms * 1000 - EPOCH_US + seq_of(h.id) % 1000 + bump),
            HINT_ID.pack(h.id) + h.bucket.encode(),
        )
        for h in hints
    ]


async def store_hints(store: StorageBackend, hints: Sequence[Hint]) -> None:
    """Store hints whose key another message's hint holds, a microsecond later each try."""

    async def attempt(todo: list[Hint], n: int) -> list[Hint]:
        stored = await store.insert(hint_rows(todo, n + 1))
        return [h for h, ok in zip(todo, stored, strict=True) if not ok]

    if left := await placed(list(hints), attempt):
        log.warning(
            "%d messages have no expiry hint: they expire when a receive reaches them", len(left)
        )
