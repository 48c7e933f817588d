"""What a publish stores: each message's record, when it is due and when it expires,
and the insert that stores them under fresh ids."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from dynamiq.core.catalog import QueueRecord
from dynamiq.core.expiry import Hint, hint_rows, store_hints
from dynamiq.core.groups import group_stripe
from dynamiq.core.ids import IdGenerator
from dynamiq.core.records import Meta, encode
from dynamiq.errors import ServerError
from dynamiq.models import Outgoing
from dynamiq.storage.base import StorageBackend

__all__ = ["INSERT_ATTEMPTS", "Rows", "by_bucket", "draw", "outgoing_rows", "store_rows"]

INSERT_ATTEMPTS = 5


class Rows(NamedTuple):
    """A publish's messages: ``(bucket, record)``, due time (wall microseconds, 0:
    now) and expiry (wall milliseconds, 0: never), one entry per message; and, by
    index, the stripe a message is pinned to (``pinned``): its ordered group's,
    or its dedup claim's."""

    rows: list[tuple[str, bytes]]
    due: list[int]
    expires: list[int]
    pinned: dict[int, int]

    def subset(self, indices: Sequence[int]) -> Rows:
        """Return the messages at ``indices``, in that order."""
        pinned = self.pinned
        return Rows(
            [self.rows[i] for i in indices],
            [self.due[i] for i in indices],
            [self.expires[i] for i in indices],
            {k: pinned[i] for k, i in enumerate(indices) if i in pinned} if pinned else {},
        )


def outgoing_rows(items: Sequence[tuple[QueueRecord, bytes | Outgoing]], now_us: int) -> Rows:
    """Return what each message stores. A message without a delay of its own gets its
    queue's ``delay_seconds``; one with ``ttl_seconds`` carries its expiry."""
    now_ms = now_us // 1000
    out = Rows([], [], [], {})
    for record, m in items:
        settings = record.settings
        if isinstance(m, bytes):
            if settings.delay_seconds == 0:  # the usual publish: nothing to work out
                out.rows.append((record.uid, encode(m, now_ms, settings.compressed_messages)))
                out.due.append(0)
                out.expires.append(0)
                continue
            m = Outgoing(m)
        delay = settings.delay_seconds if m.delay_seconds is None else m.delay_seconds
        expires = now_ms + round(m.ttl_seconds * 1e3) if m.ttl_seconds else 0
        meta = Meta(
            expires_ms=expires,
            attributes=m.attributes or None,
            routing_key=m.routing_key or None,
            group=m.group,
        )
        if m.group is not None:
            out.pinned[len(out.rows)] = group_stripe(m.group)
        out.rows.append((record.uid, encode(m.body, now_ms, settings.compressed_messages, meta)))
        out.due.append(now_us + round(delay * 1e6) if delay > 0 else 0)
        out.expires.append(expires)
    return out


async def store_rows(
    store: StorageBackend, ids: IdGenerator, stripes: tuple[int, int], rows: Rows
) -> list[int]:
    """Store every message under a fresh id in its slice's ``stripes``; return the ids.

    A message with an expiry gets its hint in the same insert (one commit on
    LMDB). An id another process took meanwhile is drawn again.
    """
    out = [0] * len(rows.rows)
    todo = list(range(len(rows.rows)))
    unhinted: list[Hint] = []  # stored messages whose hint met another's key
    for attempt in range(INSERT_ATTEMPTS):
        fresh = draw(ids, rows, todo, stripes, attempt)
        batch = [
            (rows.rows[i][0], mid, rows.rows[i][1]) for i, mid in zip(todo, fresh, strict=True)
        ]
        timed = [
            Hint(bucket, mid, rows.expires[i])
            for i, (bucket, mid, _) in zip(todo, batch, strict=True)
            if rows.expires[i]
        ]
        stored = await store.insert(batch + hint_rows(timed))
        kept = {mid for (_, mid, _), ok in zip(batch, stored[: len(batch)], strict=True) if ok}
        hinted = stored[len(batch) :]
        unhinted += [h for h, ok in zip(timed, hinted, strict=True) if not ok and h.id in kept]
        for i, mid in zip(todo, fresh, strict=True):
            if mid in kept:
                out[i] = mid
        todo = [i for i, mid in zip(todo, fresh, strict=True) if mid not in kept]
        if not todo:
            break
    else:
        raise ServerError("found no free ids for every message; some may be stored, retry")
    if unhinted:
        await store_hints(store, unhinted)
    return out


def draw(
    ids: IdGenerator, rows: Rows, indices: Sequence[int], stripes: tuple[int, int], attempt: int
) -> list[int]:
    """Return fresh ids for the messages at ``indices``: in ``stripes``, or in the
    stripe a message is pinned to (in request order there)."""
    pinned = rows.pinned
    if not pinned:
        return ids.for_due([rows.due[i] for i in indices], stripes)
    fresh = [0] * len(indices)
    free: list[int] = []  # positions in indices
    runs: dict[tuple[int, int], list[int]] = {}  # (stripe, due): positions in indices
    for k, i in enumerate(indices):
        stripe = pinned.get(i)
        if stripe is None:
            free.append(k)
        else:
            runs.setdefault((stripe, rows.due[i]), []).append(k)
    if free:
        drawn = ids.for_due([rows.due[indices[k]] for k in free], stripes)
        for k, mid in zip(free, drawn, strict=True):
            fresh[k] = mid
    for (stripe, due), positions in runs.items():
        # A due time drawn again is moved by a microsecond per attempt: the
        # stripe is fixed, so an id taken would be drawn again otherwise.
        drawn = (
            ids.due(len(positions), due + attempt, (stripe, stripe))
            if due
            else ids.many(len(positions), (stripe, stripe))
        )
        for k, mid in zip(positions, drawn, strict=True):
            fresh[k] = mid
    return fresh


def by_bucket(
    rows: Sequence[tuple[str, bytes]], ids: Sequence[int]
) -> dict[str, tuple[list[int], list[bytes]]]:
    """Group stored ``(bucket, record)`` rows and their ids by bucket, in order."""
    if len({uid for uid, _ in rows}) == 1:  # one queue: the usual publish
        return {rows[0][0]: (list(ids), [record for _, record in rows])}
    out: dict[str, tuple[list[int], list[bytes]]] = {}
    for (uid, record), mid in zip(rows, ids, strict=True):
        mids, records = out.setdefault(uid, ([], []))
        mids.append(mid)
        records.append(record)
    return out
