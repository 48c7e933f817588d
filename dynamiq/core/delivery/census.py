"""What a queue holds beyond its count, read from the store in one scan per stripe."""

from __future__ import annotations

import asyncio

from dynamiq.core.ids import STRIPES, seq_of, stripe_range
from dynamiq.storage.base import StorageBackend

__all__ = ["DELAYED_COUNTED", "waiting"]

DELAYED_COUNTED = 1000  # per stripe


async def waiting(store: StorageBackend, uid: str, now_seq: int) -> tuple[float | None, int]:
    """Return the age in seconds of a bucket's oldest message due by ``now_seq`` (None
    when none is), and how many are not due yet (up to ``DELAYED_COUNTED`` per stripe).

    Ids are time-ordered within a stripe, and a delayed message's id carries its
    due time: per stripe, the first key up to ``now_seq`` is its oldest due
    message, and the keys after it are the delayed ones.
    """
    stripes = list(map(stripe_range, range(STRIPES)))
    due = [(lo, lo | now_seq) for lo, _ in stripes]
    not_due = [(end + 1, hi) for (_, end), (_, hi) in zip(due, stripes, strict=True)]
    heads, later = await asyncio.gather(
        store.scan(uid, due, 1), store.scan(uid, not_due, DELAYED_COUNTED)
    )
    seqs = [seq_of(keys[0]) for keys in heads if keys]
    delayed = sum(map(len, later))
    if not seqs:
        return None, delayed
    return max(0.0, (now_seq - min(seqs)) / 1e6), delayed
