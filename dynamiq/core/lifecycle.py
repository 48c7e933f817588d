"""A message's life after its publish: receive counts, dead letters, retry backoff.

Counts: every delivery rewrites the record with its receive count raised
before the message is handed out (one write per receive batch, in the same
group commit as the node's other writes). The count is then what the store
holds, whatever happens to the node that leased it: a crash, a restart or a
handoff loses no receive.

Dead letters: a message whose ``max_receives``-th lease ends without a
delete is moved into the queue's dead-letter queue under a new id, with its
body and metadata, its count started again and a ``DeadLetter`` note of where
it came from. A message found already at its limit when a receive reaches it
(its node died while it was leased) is moved instead of delivered.

Backoff: when the lease of a queue with ``retry_backoff`` lapses, the node
that held it keeps holding it for the backoff's delay before it is offered
again. The hold lives in that node's memory (like the lease it follows): a
node that dies while holding it lets the message be offered at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dynamiq.core.catalog import Catalog, QueueRecord
from dynamiq.core.clock import Clock
from dynamiq.core.records import Meta, meta_of, with_meta
from dynamiq.errors import ServerError
from dynamiq.models import DeadLetter, DeadLetterReason, QueueSettings
from dynamiq.storage.base import StorageBackend

__all__ = ["DeadLetters", "Delivery", "stamp"]

MOVE_ATTEMPTS = 5


class Delivery:
    """What a receive does with the records it leased: deliver, or dead-letter."""

    __slots__ = ("dead", "stamped")

    def __init__(self) -> None:
        self.stamped: list[tuple[int, bytes]] = []  # (id, record with its count raised)
        self.dead: list[tuple[int, bytes]] = []  # at their limit already: to the dead letters


def stamp(settings: QueueSettings, found: dict[int, bytes], now_ms: int) -> Delivery:
    """Sort leased records into those to deliver (count raised) and those at their limit."""
    out = Delivery()
    limit = settings.max_receives
    for mid, raw in found.items():
        _, meta = meta_of(raw)
        if limit is not None and meta.receive_count >= limit:
            out.dead.append((mid, raw))
            continue
        counted = Meta(
            meta.receive_count + 1,
            meta.first_received_ms or now_ms,
            meta.expires_ms,
            meta.dead_letter,
        )
        out.stamped.append((mid, with_meta(raw, counted)))
    return out


class DeadLetters:
    """Moves messages from a queue into its dead-letter queue."""

    def __init__(
        self,
        store: StorageBackend,
        catalog: Catalog,
        clock: Clock,
        new_ids: Callable[[int], list[int]],
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._clock = clock
        self._new_ids = new_ids

    async def move(
        self, source: QueueRecord, items: Sequence[tuple[int, bytes]], reason: DeadLetterReason
    ) -> list[int]:
        """Move ``(id, record)`` items into ``source``'s dead-letter queue; return the ids
        moved (an id already gone, deleted meanwhile, is not)."""
        target = self._catalog.queue(source.settings.dead_letter_queue or "")
        now_ms = self._clock.wall_ms()
        rows = {mid: _dead(raw, source.name, reason, now_ms) for mid, raw in items}
        moved: list[int] = []
        todo = list(rows)
        for _ in range(MOVE_ATTEMPTS):
            fresh = self._new_ids(len(todo))
            done = await self._store.move(
                [
                    (source.uid, mid, target.uid, new, rows[mid])
                    for mid, new in zip(todo, fresh, strict=True)
                ]
            )
            moved.extend(mid for mid, ok in zip(todo, done, strict=True) if ok)
            todo = [mid for mid, ok in zip(todo, done, strict=True) if ok is None]
            if not todo:
                return moved
        raise ServerError("found no free ids in the dead-letter queue; retry")


def _dead(raw: bytes, source: str, reason: DeadLetterReason, now_ms: int) -> bytes:
    _, meta = meta_of(raw)
    note = DeadLetter(source, reason, meta.receive_count, now_ms)
    return with_meta(raw, Meta(dead_letter=note))
