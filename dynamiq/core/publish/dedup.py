"""Deduplication: a message whose dedup id its queue saw within the window is not
stored again; its publish answers the first message's id.

A claim lives in the store under ``<bucket>/<dedup id>`` (the queue's bucket:
a purged or re-created queue starts afresh), or, in a queue whose
``dedup_scope`` is "group", ``<bucket>/<dedup id> <group>`` for a message of
an ordered group (SQS's ``messageGroup`` deduplication scope); it holds the
first message's id and expires after the queue's ``dedup_window_seconds``.
With ``content_dedup`` a message without a dedup id of its own is claimed by
a SHA-256 of its body and attributes.

A claim's home is a stripe: its group's when the key names the group, else
the key's own. A message is stored in its group's stripe, or, without one,
in its claim's home; so the message and its claim are one write
(``publish.insert``), but for a message whose group's stripe is not the home
of its queue-wide claim: the store then claims it in two steps
(``StorageBackend.insert_claimed``). Every node, and a node after a restart,
sees the same claims.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from dynamiq.core.delivery.groups import group_stripe
from dynamiq.core.ids import stripe_for
from dynamiq.models import Outgoing, QueueRecord

__all__ = ["DedupKey", "claims_of", "content_id", "first_claims"]


class DedupKey(NamedTuple):
    """What a message claims: its key in the store, until when (epoch ms), the stripe
    its message is stored in, and the claim's home stripe."""

    key: str
    expires_ms: int
    stripe: int
    home: int


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
    group, scope = (m.group, m.dedup_scope) if isinstance(m, Outgoing) else (None, None)
    if group is not None and (scope or settings.dedup_scope) == "group":
        # A space is in neither a dedup id nor a group.
        stripe = group_stripe(group)
        return DedupKey(f"{record.uid}/{dedup_id} {group}", expires_ms, stripe, stripe)
    key = f"{record.uid}/{dedup_id}"
    home = stripe_for(key)
    return DedupKey(key, expires_ms, home if group is None else group_stripe(group), home)


def first_claims(
    claims: Sequence[DedupKey | None] | None, size: int
) -> tuple[list[int], list[tuple[int, int]]]:
    """Return the messages of a publish to insert, in order (all but those repeating a
    claim made earlier in the request), and the repeats: ``(message, first)``."""
    if claims is None:
        return list(range(size)), []
    first: dict[str, int] = {}
    todo: list[int] = []
    repeats: list[tuple[int, int]] = []
    for i, claim in enumerate(claims):
        if claim is None:
            todo.append(i)
        elif claim.key in first:
            repeats.append((i, first[claim.key]))
        else:
            first[claim.key] = i
            todo.append(i)
    return todo, repeats
