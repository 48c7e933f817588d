"""The path every publish takes to the store: rows → ids → insert → hints.

Each message gets a fresh id in the node's slice (or in the stripe it is
pinned to: its ordered group's, or its dedup claim's). A message that claims
nothing is inserted plain, with its expiry hint in the same insert (one
commit on LMDB); one with a dedup claim is inserted with its claim
(``StorageBackend.insert_claimed``), or answered with the first message's id
when the claim is held. An id another process took meanwhile is drawn again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from dynamiq.core.ids import IdGenerator
from dynamiq.core.publish.attempts import placed
from dynamiq.core.publish.dedup import DedupKey, first_claims
from dynamiq.core.publish.hints import Hint, hint_rows, store_hints
from dynamiq.core.publish.outgoing import Rows, draw
from dynamiq.errors import ServerError
from dynamiq.models import Outgoing, QueueRecord
from dynamiq.storage.base import Claimed, StorageBackend

__all__ = ["Stored", "store_messages"]

# Per message of an insert: True stored, False its id was taken, bytes the
# value of the claim that holds its dedup key (the first message's id).
Answer = bool | bytes


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


async def store_messages(
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
    size = len(rows.rows)
    todo, repeats = first_claims(claims, size)
    if claims is not None:  # a claiming message is stored in its claim's stripe
        pins = {i: claim.stripe for i in todo if (claim := claims[i]) is not None}
        rows = rows._replace(pinned=rows.pinned | pins)
    got = [0] * size  # per message: its id, once stored (a duplicate's: the first's)
    duplicate = [False] * size
    unhinted: list[Hint] = []  # stored plain, but their hint met another's key

    async def attempt(pending: list[int], n: int) -> list[int]:
        fresh = draw(ids, rows, pending, stripes, n)
        answers, missed = await _insert(store, rows, claims, pending, fresh, now_ms)
        unhinted.extend(missed)
        if claims is None and len(pending) == size and all(answers):  # the usual publish
            got[:] = fresh
            return []
        taken: list[int] = []
        for i, mid, answer in zip(pending, fresh, answers, strict=True):
            if answer is True:
                got[i] = mid
            elif answer is False:
                taken.append(i)
            else:
                got[i], duplicate[i] = int(answer), True
        return taken

    if await placed(todo, attempt):
        raise ServerError("found no free ids for every message; some may be stored, retry")
    if claims is not None:  # claimed inserts carry no hints: theirs come now
        unhinted += [
            Hint(rows.rows[i][0], got[i], rows.expires[i])
            for i in todo
            if claims[i] is not None and rows.expires[i] and not duplicate[i]
        ]
    if unhinted:
        await store_hints(store, unhinted)
    return _outcome(rows, got, duplicate, repeats, claims is None)


async def _insert(
    store: StorageBackend,
    rows: Rows,
    claims: Sequence[DedupKey | None] | None,
    todo: list[int],
    fresh: list[int],
    now_ms: int,
) -> tuple[Sequence[Answer], list[Hint]]:
    """Insert the messages at ``todo`` under ``fresh`` ids, plain or with their claim;
    return per message its answer, and the hints of plain ones that met a key."""
    if claims is None:  # the usual publish: every message plain
        return await _insert_plain(store, rows, todo, fresh)
    answers: list[Answer] = [False] * len(todo)
    plain = [k for k, i in enumerate(todo) if claims[i] is None]
    claimed = [k for k, i in enumerate(todo) if claims[i] is not None]
    missed: list[Hint] = []
    if plain:
        got, missed = await _insert_plain(
            store, rows, [todo[k] for k in plain], [fresh[k] for k in plain]
        )
        for k, answer in zip(plain, got, strict=True):
            answers[k] = answer
    if claimed:
        batch: list[Claimed] = []
        for k in claimed:
            (bucket, record), claim = rows.rows[todo[k]], claims[todo[k]]
            assert claim is not None  # only claiming messages are in ``claimed``
            mid = fresh[k]
            claimed_as = str(mid).encode()
            batch.append((bucket, mid, record, claim.key, claimed_as, claim.expires_ms, claim.home))
        for k, answer in zip(claimed, await store.insert_claimed(batch, now_ms), strict=True):
            answers[k] = answer
    return answers, missed


async def _insert_plain(
    store: StorageBackend, rows: Rows, todo: list[int], fresh: list[int]
) -> tuple[Sequence[Answer], list[Hint]]:
    """Insert messages with their expiry hints in one insert; return per message
    whether it was stored, and the hints of stored messages that met another's key."""
    if len(todo) == len(rows.rows):  # every message (the first try): none looked up
        batch = [(b, mid, record) for (b, record), mid in zip(rows.rows, fresh, strict=True)]
    else:
        batch = [
            (rows.rows[i][0], mid, rows.rows[i][1]) for i, mid in zip(todo, fresh, strict=True)
        ]
    if not any(rows.expires):
        return await store.insert(batch), []
    timed = [
        Hint(bucket, mid, rows.expires[i])
        for i, (bucket, mid, _) in zip(todo, batch, strict=True)
        if rows.expires[i]
    ]
    stored = await store.insert(batch + hint_rows(timed))
    answers = stored[: len(batch)]
    kept = {mid for (_, mid, _), ok in zip(batch, answers, strict=True) if ok}
    hinted = stored[len(batch) :]
    return answers, [h for h, ok in zip(timed, hinted, strict=True) if not ok and h.id in kept]


def _outcome(
    rows: Rows,
    got: list[int],
    duplicate: list[bool],
    repeats: Sequence[tuple[int, int]],
    plain: bool,
) -> Stored:
    """What was stored: ids in request order, a repeated claim answered as its first."""
    if plain:  # nothing claimed: nothing is a duplicate
        return Stored(got, [], rows, got)
    for i, j in repeats:
        got[i], duplicate[i] = got[j], True
    kept = [i for i, dup in enumerate(duplicate) if not dup]
    return Stored(got, duplicate, rows.subset(kept), [got[i] for i in kept])
