"""Deduplication: a message whose dedup id its queue saw within the window is not
stored again; its publish answers the first message's id.

A claim lives in the store under ``<bucket>/<dedup id>`` (the queue's bucket:
a purged or re-created queue starts afresh), or ``<bucket>/<dedup id> <group>``
for a message of an ordered group (its id is scoped to its group, as SQS's
``messageGroup`` deduplication scope), holds the first message's id and
expires after the queue's ``dedup_window_seconds``. With ``content_dedup`` a
message without a dedup id of its own is claimed by a SHA-256 of its body and
attributes.

Every message claiming one key gets an id in one stripe (its group's, or the
key's own), and the message and its claim are written together
(``StorageBackend.insert_claimed``), so every node, and a node after a
restart, sees the same claims.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from dynamiq.core.catalog import QueueRecord
from dynamiq.core.expiry import Hint, store_hints
from dynamiq.core.groups import group_stripe
from dynamiq.core.ids import IdGenerator, stripe_for
from dynamiq.core.outgoing import INSERT_ATTEMPTS, Rows, draw, store_rows
from dynamiq.errors import ServerError
from dynamiq.models import Outgoing
from dynamiq.storage.base import Claimed, StorageBackend

__all__ = ["DedupKey", "Stored", "claims_of", "content_id", "store_once"]


class DedupKey(NamedTuple):
    """What a message claims: its key in the store, until when (epoch ms), and the
    stripe its message is stored in."""

    key: str
    expires_ms: int
    stripe: int


def content_id(message: bytes | Outgoing) -> str:
    """Return the SHA-256 (hex) of a message's body and attributes."""
    if isinstance(message, bytes):
        return hashlib.sha256(message).hexdigest()
    digest = hashlib.sha256(message.body)
    if message.attributes:
        # msgpack keeps text, bytes, integers and floats apart.
        digest.update(msgspec.msgpack.encode(sorted(message.attributes.items())))
    return digest.hexdigest()


def claims_of(
    items: Sequence[tuple[QueueRecord, bytes | Outgoing]], now_ms: int
) -> list[DedupKey | None] | None:
    """Return what each message claims (None for one that claims nothing), or None
    when no message claims anything (the usual publish: one cheap test each)."""
    out: list[DedupKey | None] | None = None
    for index, (record, m) in enumerate(items):
        if isinstance(m, bytes) and not record.settings.content_dedup:
            continue
        claim = _claim(record, m, now_ms)
        if claim is not None:
            if out is None:
                out = [None] * len(items)
            out[index] = claim
    return out


def _claim(record: QueueRecord, m: bytes | Outgoing, now_ms: int) -> DedupKey | None:
    settings = record.settings
    if isinstance(m, Outgoing) and m.dedup_id is not None:
        dedup_id = m.dedup_id
    elif settings.content_dedup:
        dedup_id = content_id(m)
    else:
        return None
    expires_ms = now_ms + round(settings.dedup_window_seconds * 1000)
    group = m.group if isinstance(m, Outgoing) else None
    if group is None:
        key = f"{record.uid}/{dedup_id}"
        return DedupKey(key, expires_ms, stripe_for(key))
    # A space is in neither a dedup id nor a group; the message is in its group's stripe.
    return DedupKey(f"{record.uid}/{dedup_id} {group}", expires_ms, group_stripe(group))


class Stored(NamedTuple):
    """What a publish stored: per message its id (the first message's, for a
    duplicate) and whether it was a duplicate (empty: none was); the rows
    stored and their ids."""

    ids: list[int]
    duplicate: list[bool]
    rows: Rows
    stored: list[int]

    def firsts(self, items: Sequence[tuple[QueueRecord, bytes | Outgoing]]) -> dict[str, list[int]]:
        """Per bucket (of ``items``, the publish's messages), the ids the duplicates
        were answered with: their first copies."""
        out: dict[str, list[int]] = {}
        for i, dup in enumerate(self.duplicate):
            if dup:
                out.setdefault(items[i][0].uid, []).append(self.ids[i])
        return out


async def store_once(
    store: StorageBackend,
    ids: IdGenerator,
    stripes: tuple[int, int],
    rows: Rows,
    claims: Sequence[DedupKey | None] | None,
    now_ms: int,
) -> Stored:
    """Store each message whose claim is free, and every one that claims nothing
    (``claims`` None: no message claims anything), under a fresh id in ``stripes``.

    A claim repeated within the request is the first one's duplicate.
    """
    if claims is None:  # the usual publish
        stored = await store_rows(store, ids, stripes, rows)
        return Stored(stored, [], rows, stored)
    size = len(rows.rows)
    out, duplicate = [0] * size, [False] * size
    first: dict[str, int] = {}
    repeats: list[tuple[int, int]] = []
    plain: list[int] = []
    for i, claim in enumerate(claims):
        if claim is None:
            plain.append(i)
        elif claim.key in first:
            repeats.append((i, first[claim.key]))
        else:
            first[claim.key] = i
    if plain:
        stored = await store_rows(store, ids, stripes, rows.subset(plain))
        for i, mid in zip(plain, stored, strict=True):
            out[i] = mid
    claimed = list(first.values())
    pins = {i: claim.stripe for i in claimed if (claim := claims[i]) is not None}
    rows = rows._replace(pinned=rows.pinned | pins)
    answers = await _store_claimed(store, ids, stripes, rows, claims, claimed, now_ms)
    for i, (mid, dup) in zip(claimed, answers, strict=True):
        out[i], duplicate[i] = mid, dup
    for i, j in repeats:
        out[i], duplicate[i] = out[j], True
    kept = [i for i in range(size) if not duplicate[i]]
    return Stored(out, duplicate, rows.subset(kept), [out[i] for i in kept])


async def _store_claimed(
    store: StorageBackend,
    ids: IdGenerator,
    stripes: tuple[int, int],
    rows: Rows,
    claims: Sequence[DedupKey | None],
    todo: list[int],
    now_ms: int,
) -> list[tuple[int, bool]]:
    """Store the messages at ``todo`` (distinct claims) with their claims; return per
    message its id and whether it was a duplicate (the first message's id)."""
    got: dict[int, tuple[int, bool]] = {}
    pending = todo
    for attempt in range(INSERT_ATTEMPTS):
        fresh = draw(ids, rows, pending, stripes, attempt)
        batch: list[Claimed] = []
        for i, mid in zip(pending, fresh, strict=True):
            (bucket, record), claim = rows.rows[i], claims[i]
            assert claim is not None  # only claiming messages come here
            batch.append((bucket, mid, record, claim.key, str(mid).encode(), claim.expires_ms))
        answers = await store.insert_claimed(batch, now_ms)
        taken: list[int] = []
        for i, mid, answer in zip(pending, fresh, answers, strict=True):
            if answer is True:
                got[i] = (mid, False)
            elif answer is False:
                taken.append(i)  # another message has that id: draw again
            else:
                got[i] = (int(answer), True)
        pending = taken
        if not pending:
            break
    else:
        raise ServerError("found no free ids for every message; some may be stored, retry")
    timed = [
        Hint(rows.rows[i][0], got[i][0], rows.expires[i])
        for i in todo
        if rows.expires[i] and not got[i][1]
    ]
    if timed:  # their hints, which the claimed insert did not carry
        await store_hints(store, timed)
    return [got[i] for i in todo]
