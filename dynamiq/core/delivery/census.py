"""What a queue holds, read from the store in one census of its stripes."""

from __future__ import annotations

from typing import NamedTuple

from dynamiq.core.ids import STRIPES, seq_of, stripe_range
from dynamiq.storage.base import StorageBackend

__all__ = ["DELAYED_COUNTED", "Held", "held"]

DELAYED_COUNTED = 1000  # per stripe
_STRIPES = [stripe_range(stripe) for stripe in range(STRIPES)]


class Held(NamedTuple):
    """A bucket's messages (its count), the age in seconds of its oldest one due (None:
    none is), and how many are not due yet (up to ``DELAYED_COUNTED`` per stripe)."""

    depth: int
    oldest_age: float | None
    delayed: int


async def held(store: StorageBackend, uid: str, now_seq: int) -> Held:
    """Return what bucket ``uid`` holds by ``now_seq``.

    Ids are time-ordered within a stripe, and a delayed message's id carries its
    due time: per stripe, the first key up to ``now_seq`` is its oldest due
    message, and the keys after it are the delayed ones.
    """
    spans = [(lo, lo | now_seq, hi) for lo, hi in _STRIPES]
    found = await store.census(uid, spans, DELAYED_COUNTED)
    seqs = [seq_of(key) for key in found.firsts if key is not None]
    oldest = max(0.0, (now_seq - min(seqs)) / 1e6) if seqs else None
    return Held(found.objects, oldest, sum(found.after))
