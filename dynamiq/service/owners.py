"""Which live member's slice holds an id, and telling members what concerns them."""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_right
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence

from dynamiq.cluster.base import Member, Membership
from dynamiq.cluster.peers import PeerClient
from dynamiq.errors import BackendUnavailable, PeerUnavailable
from dynamiq.models import Outgoing

__all__ = ["TELL_SECONDS", "by_owner", "pinned_ids", "quietly", "tell", "tell_owners"]

log = logging.getLogger("dynamiq.service")

TELL_SECONDS = 1.0  # a publish in another member's slice waits this long for it to hear
TELL_RETRY_SECONDS = 0.1


def by_owner(
    membership: Membership, ids: Sequence[int]
) -> tuple[list[int], list[tuple[Member, list[int]]]]:
    """Split ids into this node's and, per other live member, the ones its slice holds."""
    local = membership.local().name
    members = {m.name: m for m in membership.members()}
    bounds = sorted((membership.slice_of(n), n) for n in members)
    starts = [lo for (lo, _), _ in bounds]
    owned: dict[str, list[int]] = {}
    for mid in ids:
        at = bisect_right(starts, mid) - 1  # the last slice starting at or before mid
        owner = bounds[at][1] if at >= 0 and mid <= bounds[at][0][1] else local
        owned.setdefault(owner, []).append(mid)
    mine = owned.pop(local, [])
    return mine, [(members[name], theirs) for name, theirs in owned.items()]


def pinned_ids(messages: Sequence[bytes | Outgoing], ids: Sequence[int | None]) -> set[int]:
    """The ids of the messages pinned to a stripe (an ordered group's, a dedup id's); none
    without ``messages`` (copies of wide fan-outs, never pinned, told as they land)."""
    if not messages:
        return set()
    return {
        mid
        for m, mid in zip(messages, ids, strict=True)
        if mid is not None and isinstance(m, Outgoing) and (m.group or m.dedup_id)
    }


async def tell_owners(
    peers: PeerClient,
    membership: Membership,
    placed: Mapping[str, Sequence[int | None]],
    messages: Sequence[bytes | Outgoing],
    serves: Callable[[Sequence[int]], bool],
) -> None:
    """Tell the members whose slices hold some of a publish's ids about them, before
    the publish is answered: per queue (``placed``: several for a topic's fan-out),
    the id of each of ``messages``, None where none was stored there.

    Only a message pinned to a stripe (an ordered group's, a dedup id's)
    lands outside the slice this node ``serves``, unless it serves nothing
    now (its publishes then take ids anywhere). Whoever serves it would meet
    it only at a walk's next fresh start, and could hand out a later message
    of its group, published through itself, first. So a pinned message is
    acknowledged only once the member serving it heard of it (``tell``); and
    one in this node's own slice by its view, only once this node serves that
    with the right to (it is taking the slice over, or cut off from the
    majority and its view is stale: another node may serve the slice). A
    duplicate is told too: its first copy may be from an attempt that failed
    after storing it, before telling. A plain message elsewhere is told as
    it can be: a walk meets it later at worst.

    Raises:
        BackendUnavailable: a pinned message is not known in time to the node
            serving it. The publish is not acknowledged, and the publisher
            sends it again, through another node if need be (a dedup id finds
            the first copy).
    """
    every = [i for ids in placed.values() for i in ids if i is not None]
    if not every or serves(every):  # every plain publish of a serving node: one look
        return
    calls: list[Awaitable[None]] = []
    for queue, ids in placed.items():
        stored = [i for i in ids if i is not None]
        if not stored or serves(stored):
            continue
        pinned = pinned_ids(messages, ids)
        mine, theirs = by_owner(membership, stored)
        calls += [
            tell(peers, member, queue, owned)
            if not pinned.isdisjoint(owned)
            else quietly(peers.published(member, queue, owned))
            for member, owned in theirs
        ]
        if own := [mid for mid in mine if mid in pinned]:
            calls.append(_until_served(serves, own))
    if calls:
        await asyncio.gather(*calls)


async def _until_served(serves: Callable[[Sequence[int]], bool], ids: list[int]) -> None:
    """Wait up to ``TELL_SECONDS`` for this node to serve ``ids``.

    Raises:
        BackendUnavailable: it did not (taking its slice over, or cut off).
    """

    async def served() -> str | None:
        return None if serves(ids) else "not served"

    if await _patiently(served) is not None:
        raise BackendUnavailable(
            "stored in this node's slice, which it does not serve now (it is taking "
            "it over, or is cut off from the majority): not acknowledged, publish it again"
        )


async def tell(peers: PeerClient, member: Member, queue: str, ids: list[int]) -> None:
    """Tell ``member`` that ``ids`` of ``queue`` were stored in its slice, asking again
    for up to ``TELL_SECONDS``.

    Raises:
        BackendUnavailable: it did not answer (cut off from this node, or gone).
    """

    async def told() -> str | None:
        try:
            await peers.published(member, queue, ids)
        except PeerUnavailable as exc:
            return str(exc)
        return None

    if (why := await _patiently(told)) is not None:
        raise BackendUnavailable(
            f"stored, but {member.name}, which serves it, could not be told "
            f"({why}): not acknowledged, publish it again"
        )


async def _patiently(attempt: Callable[[], Awaitable[str | None]]) -> str | None:
    """Make ``attempt`` every ``TELL_RETRY_SECONDS`` until it succeeds (answers None)
    or ``TELL_SECONDS`` have passed; return why the last one failed, if it did."""
    deadline = time.monotonic() + TELL_SECONDS
    while (why := await attempt()) is not None:
        if time.monotonic() >= deadline:
            return why
        await asyncio.sleep(TELL_RETRY_SECONDS)
    return None


async def quietly(call: Coroutine[object, object, None]) -> None:
    """Await a call to a peer whose failure changes nothing the caller could help."""
    try:
        await call
    except PeerUnavailable as exc:  # e.g. its leases end by their timeout instead
        log.debug("a peer did not answer: %s", exc)
