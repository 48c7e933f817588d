"""What a publish stores: each message's record and its due time, grouped by queue."""

from __future__ import annotations

from collections.abc import Sequence

from dynamiq.core.catalog import QueueRecord
from dynamiq.core.records import NO_META, Meta, encode
from dynamiq.models import Outgoing

__all__ = ["by_bucket", "outgoing_rows"]


def outgoing_rows(
    items: Sequence[tuple[QueueRecord, bytes | Outgoing]], now_us: int
) -> tuple[list[tuple[str, bytes]], list[int]]:
    """Return a ``(bucket, record)`` row per message, and when each is due (wall
    microseconds; 0 when due now). A message without a delay of its own gets its
    queue's ``delay_seconds``; one with ``ttl_seconds`` carries its expiry."""
    now_ms = now_us // 1000
    rows: list[tuple[str, bytes]] = []
    due: list[int] = []
    for record, m in items:
        settings = record.settings
        if isinstance(m, bytes):
            if settings.delay_seconds == 0:  # the usual publish: nothing to work out
                rows.append((record.uid, encode(m, now_ms, settings.compressed_messages)))
                due.append(0)
                continue
            m = Outgoing(m)
        delay = settings.delay_seconds if m.delay_seconds is None else m.delay_seconds
        meta = NO_META if not m.ttl_seconds else Meta(expires_ms=now_ms + int(m.ttl_seconds * 1e3))
        rows.append((record.uid, encode(m.body, now_ms, settings.compressed_messages, meta)))
        due.append(now_us + int(delay * 1e6) if delay > 0 else 0)
    return rows, due


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
