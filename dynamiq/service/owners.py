"""Which live member's slice holds an id, and telling members what concerns them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Sequence

from dynamiq.cluster.base import Member, Membership
from dynamiq.cluster.peers import PeerClient
from dynamiq.errors import BackendUnavailable, PeerUnavailable
from dynamiq.models import Outgoing

__all__ = ["TELL_SECONDS", "by_owner", "pinned_ids", "quietly", "tell"]

log = logging.getLogger("dynamiq.cluster")

TELL_SECONDS = 1.0  # a publish in another member's slice waits this long for it to hear
TELL_RETRY_SECONDS = 0.1


def by_owner(
    membership: Membership, ids: Sequence[int]
) -> tuple[list[int], list[tuple[Member, list[int]]]]:
    """Split ids into this node's and, per other live member, the ones its slice holds."""
    local = membership.local()
    members = {m.name: m for m in membership.members()}
    bounds = sorted((membership.slice_of(n), n) for n in members)
    owned: dict[str, list[int]] = {}
    for mid in ids:
        owner = next((n for (lo, hi), n in bounds if lo <= mid <= hi), local.name)
        owned.setdefault(owner, []).append(mid)
    mine = owned.pop(local.name, [])
    return mine, [(members[name], theirs) for name, theirs in owned.items()]


def pinned_ids(messages: Sequence[bytes | Outgoing], ids: Sequence[int | None]) -> set[int]:
    """The ids of the messages pinned to a stripe (an ordered group's, a dedup id's)."""
    return {
        mid
        for m, mid in zip(messages, ids, strict=True)
        if mid is not None and isinstance(m, Outgoing) and (m.group or m.dedup_id)
    }


async def tell(peers: PeerClient, member: Member, queue: str, ids: list[int]) -> None:
    """Tell ``member`` that ``ids`` of ``queue`` were stored in its slice, asking again
    for up to ``TELL_SECONDS``.

    Raises:
        BackendUnavailable: it did not answer (cut off from this node, or gone).
    """
    deadline = time.monotonic() + TELL_SECONDS
    while True:
        try:
            return await peers.published(member, queue, ids)
        except PeerUnavailable as exc:
            if time.monotonic() >= deadline:
                raise BackendUnavailable(
                    f"stored, but {member.name}, which serves it, could not be told "
                    f"({exc}): not acknowledged, publish it again"
                ) from exc
        await asyncio.sleep(TELL_RETRY_SECONDS)


async def quietly(call: Coroutine[object, object, None]) -> None:
    """Await a call to a peer whose failure changes nothing the caller could help."""
    try:
        await call
    except PeerUnavailable as exc:  # e.g. its leases end by their timeout instead
        log.debug("a peer did not answer: %s", exc)
