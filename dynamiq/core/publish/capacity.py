"""A queue's ``max_depth``: publishes that would take it past are refused (reject-publish).

RabbitMQ's ``x-max-length`` with ``overflow = reject-publish``: the publisher
is told, nothing is dropped, and consumers make the room. The depth is the
store's own count, the same one ``stats`` reports, read once per bounded queue
per publish; queues without a bound cost nothing. Publishes that run at once
(on one node or several) each see the count before the others' land, so a
queue can pass its bound by what they carry together, never by more.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

from dynamiq.errors import QueueFull
from dynamiq.models import Outgoing, QueueRecord
from dynamiq.storage.base import StorageBackend

__all__ = ["check_room"]


async def check_room(
    store: StorageBackend, items: Sequence[tuple[QueueRecord, bytes | Outgoing]]
) -> None:
    """Raise ``QueueFull`` if a queue of ``items`` that has a ``max_depth`` has no room
    for all of its messages among them (the whole publish is refused, then)."""
    wanted: Counter[str] = Counter()  # per bounded queue, messages of this publish
    bounds: dict[str, int] = {}
    for record, _ in items:
        if record.settings.max_depth is not None:
            wanted[record.uid] += 1
            bounds[record.uid] = record.settings.max_depth
    if not bounds:
        return
    uids = list(bounds)
    depths = await asyncio.gather(*(store.count(uid) for uid in uids))
    for uid, depth in zip(uids, depths, strict=True):
        if depth + wanted[uid] > bounds[uid]:
            raise QueueFull(
                f"the queue holds {depth} of its max_depth {bounds[uid]} messages: "
                f"{wanted[uid]} more do not fit; retry once consumers have made room"
            )
