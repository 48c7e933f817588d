"""What a publish stores: each message's record, when it is due and when it expires,
and the ids drawn for them."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import NamedTuple

from dynamiq.core.delivery.groups import group_stripe
from dynamiq.core.ids import IdGenerator
from dynamiq.core.records import Meta, encode
from dynamiq.models import Outgoing, QueueRecord

__all__ = ["Rows", "by_bucket", "draw", "outgoing_rows"]


class Rows(NamedTuple):
    """A publish's messages: ``(bucket, record)``, due time (wall microseconds, 0:
    now) and expiry (wall milliseconds, 0: never), one entry per message; and, by
    index, the stripe a message is pinned to (``pinned``): its ordered group's,
    or its dedup claim's; and, by index, its tenant's hash (``tenants``): a
    tenant's messages share one stripe of the publishing node's slice, so that
    a receive can pass a tenant by (``fairness``)."""

    rows: list[tuple[str, bytes]]
    due: list[int]
    expires: list[int]
    pinned: dict[int, int]
    tenants: dict[int, int]

    def subset(self, indices: Sequence[int]) -> Rows:
        """Return the messages at ``indices``, in that order."""
        return Rows(
            [self.rows[i] for i in indices],
            [self.due[i] for i in indices],
            [self.expires[i] for i in indices],
            _at(self.pinned, indices),
            _at(self.tenants, indices),
        )


def _at(by_index: dict[int, int], indices: Sequence[int]) -> dict[int, int]:
    """Return ``by_index`` renumbered for the messages at ``indices``."""
    if not by_index:
        return by_index
    return {k: by_index[i] for k, i in enumerate(indices) if i in by_index}


def outgoing_rows(items: Sequence[tuple[QueueRecord, bytes | Outgoing]], now_us: int) -> Rows:
    """Return what each message stores. A message without a delay of its own gets its
    queue's ``delay_seconds``; one with ``ttl_seconds`` carries its expiry."""
    now_ms = now_us // 1000
    out = Rows([], [], [], {}, {})
    encoded: dict[tuple[int, bool], bytes] = {}  # a fan-out stores each message many times
    for record, m in items:
        settings = record.settings
        if isinstance(m, bytes):
            if settings.delay_seconds == 0:  # the usual publish: nothing to work out
                compress = settings.compressed_messages
                stored = encoded.get((id(m), compress))
                if stored is None:
                    stored = encoded[id(m), compress] = encode(m, now_ms, compress)
                out.rows.append((record.uid, stored))
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
            dedup_id=m.dedup_id,
            trace=m.trace,
            attribute_types=m.attribute_types or None,
            tenant=m.tenant,
        )
        if m.group is not None:
            out.pinned[len(out.rows)] = group_stripe(m.group)
        elif m.tenant is not None:
            out.tenants[len(out.rows)] = zlib.crc32(m.tenant.encode())
        out.rows.append((record.uid, encode(m.body, now_ms, settings.compressed_messages, meta)))
        out.due.append(now_us + round(delay * 1e6) if delay > 0 else 0)
        out.expires.append(expires)
    return out


def draw(
    ids: IdGenerator, rows: Rows, indices: Sequence[int], stripes: tuple[int, int], attempt: int
) -> list[int]:
    """Return fresh ids for the messages at ``indices``: in ``stripes``, or in the
    stripe a message is pinned to, or its tenant's among ``stripes`` (in request
    order there)."""
    pinned, tenants = rows.pinned, rows.tenants
    if not pinned and not tenants:
        return ids.for_due([rows.due[i] for i in indices], stripes)
    first, count = stripes[0], stripes[1] - stripes[0] + 1
    fresh = [0] * len(indices)
    free: list[int] = []  # positions in indices
    runs: dict[tuple[int, int], list[int]] = {}  # (stripe, due): positions in indices
    for k, i in enumerate(indices):
        stripe = pinned.get(i)
        if stripe is None and i in tenants:
            stripe = first + tenants[i] % count
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
    buckets = len({uid for uid, _ in rows})
    if buckets == 1:  # one queue: the usual publish
        return {rows[0][0]: (list(ids), [record for _, record in rows])}
    if buckets == len(rows):  # a broadcast: one each
        return {uid: ([mid], [record]) for (uid, record), mid in zip(rows, ids, strict=True)}
    out: dict[str, tuple[list[int], list[bytes]]] = {}
    for (uid, record), mid in zip(rows, ids, strict=True):
        mids, records = out.setdefault(uid, ([], []))
        mids.append(mid)
        records.append(record)
    return out
