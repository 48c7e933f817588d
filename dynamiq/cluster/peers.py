"""The HTTP client a node uses to talk to its peers (internal routes, msgpack)."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import TypeVar

import aiohttp
import msgspec

from dynamiq.cluster.base import PROTOCOL, Member
from dynamiq.cluster.wire import (
    PEER_HEADER,
    PROTOCOL_HEADER,
    CatalogChange,
    Handoff,
    HandoffLeases,
    Heartbeat,
    Leave,
    News,
    PeerCounts,
    PeerIds,
    PeerMessages,
    PeerMetrics,
    PeerReceive,
    PeerServing,
    PeerSigner,
    PeerStats,
    PeerVisibility,
    QueueNames,
)
from dynamiq.errors import PeerUnavailable
from dynamiq.keyspace import KeyRange
from dynamiq.models import HeldLease, LocalQueueStats, Message

__all__ = ["PeerClient"]

T = TypeVar("T")

log = logging.getLogger("dynamiq.cluster")

PEER_TIMEOUT_SECONDS = 2.0
MSGPACK = "application/msgpack"


class PeerClient:
    """Requests to other members, signed; every failure is a ``PeerUnavailable``.

    ``tls`` returns the context to verify peers with (and show them this node's
    certificate); None when the cluster speaks plain HTTP. It is asked per
    request, so certificates reloaded are used from the next connection.
    """

    def __init__(
        self,
        signer: PeerSigner,
        tls: Callable[[], ssl.SSLContext] | None = None,
        timeout: float = PEER_TIMEOUT_SECONDS,
    ) -> None:
        self._signer = signer
        self._tls = tls
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._encoder = msgspec.msgpack.Encoder()

    async def close(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            await self._session.close()

    async def receive(
        self, member: Member, queue: str, count: int, visibility: float | None, waiter: str = ""
    ) -> list[Message]:
        """Lease up to ``count`` from ``member``'s own slice (none if it lacks the queue).

        ``waiter`` (this member's name, for a receive that waits) asks to be told
        (``news``) when ``member`` next stores messages of the queue, if it has none now.
        """
        ask = PeerReceive(count, visibility, waiter)
        try:
            got = await self._post(member, f"queues/{queue}/receive", ask, PeerMessages)
        except PeerUnavailable as exc:
            if exc.peer_status == 404:  # the queue is not there yet (or any more)
                return []
            raise
        return got.messages

    async def change_visibility(
        self, member: Member, queue: str, ids: list[int], seconds: float
    ) -> list[int]:
        """Change leases ``member`` holds; return the ids that were live there."""
        got = await self._post(
            member, f"queues/{queue}/visibility", PeerVisibility(ids, seconds), PeerIds
        )
        return got.ids

    async def deliveries(self, member: Member, queue: str, ids: list[int]) -> list[int]:
        """Per id, the receive count ``member`` last delivered it with (0: never)."""
        got = await self._post(member, f"queues/{queue}/deliveries", PeerIds(ids), PeerCounts)
        return got.counts

    async def release(self, member: Member, queue: str, ids: list[int]) -> None:
        """Tell ``member`` that ``ids`` were deleted: end its leases on them."""
        await self._post(member, f"queues/{queue}/release", PeerIds(ids), None)

    async def news(self, member: Member, queue: str, name: str) -> None:
        """Tell ``member`` (waiting on ``queue``) that this member ``name`` stored some."""
        await self._post(member, f"queues/{queue}/news", News(name), None)

    async def published(self, member: Member, queue: str, ids: list[int]) -> None:
        """Tell ``member`` that ``ids`` were stored in its slice: its walks meet them now."""
        await self._post(member, f"queues/{queue}/published", PeerIds(ids), None)

    async def stats(self, member: Member, queues: list[str]) -> dict[str, LocalQueueStats]:
        """Return ``member``'s own leases in flight and rates per queue."""
        return (await self._post(member, "stats", QueueNames(queues), PeerStats)).queues

    async def summed_stats(
        self, members: list[Member], queues: list[str]
    ) -> dict[str, LocalQueueStats]:
        """Sum ``members``' own leases in flight and rates per queue (those that do not
        answer count 0)."""
        totals: dict[str, LocalQueueStats] = {}
        results = await asyncio.gather(
            *(self.stats(m, queues) for m in members), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                log.debug("stats from a peer: %s", result)
                continue
            for name, stats in result.items():
                totals[name] = totals.get(name, LocalQueueStats()) + stats
        return totals

    async def serving(self, member: Member) -> KeyRange | None:
        """Return the ids ``member`` serves now (None while it waits for its slice)."""
        got = (await self._post(member, "serving", None, PeerServing)).serving
        return (got[0], got[1]) if len(got) == 2 else None

    async def metrics(self, member: Member) -> bytes:
        """Return ``member``'s own metrics in the Prometheus text format."""
        return (await self._post(member, "metrics", None, PeerMetrics)).text

    async def handoff(
        self, member: Member, lo: int, hi: int, name: str, gone: list[str]
    ) -> dict[str, list[HeldLease]] | None:
        """Ask ``member`` to hand over ``[lo, hi]``; None while it still serves part of it
        or has heard from one of the members ``gone`` too lately."""
        try:
            got = await self._post(member, "handoff", Handoff(lo, hi, name, gone), HandoffLeases)
        except PeerUnavailable as exc:
            if exc.peer_status == 409:
                return None
            raise
        return got.leases

    async def heartbeat(self, member: Member, name: str, seconds: float) -> None:
        """Send ``member`` a heartbeat from ``name``; return once it answered (within
        ``seconds``)."""
        await self._post(member, "heartbeat", Heartbeat(name), None, seconds)

    async def sync(self, member: Member, change: CatalogChange | None = None) -> None:
        """Tell ``member`` the catalog changed: read again what ``change`` names (a
        member of protocol 3 on), or the whole catalog."""
        said = change if change is not None and member.protocol >= 3 else None
        await self._post(member, "sync", said, None)

    async def leave(self, member: Member, name: str, boot: str) -> None:
        """Tell ``member`` that this node is leaving."""
        await self._post(member, "leave", Leave(name, boot), None)

    async def _post(
        self,
        member: Member,
        path: str,
        body: object,
        kind: type[T] | None,
        seconds: float | None = None,
    ) -> T:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        path = f"/internal/v1/{path}"
        data = self._encoder.encode(body)
        headers = {
            PEER_HEADER: self._signer.sign(path, data),
            PROTOCOL_HEADER: str(PROTOCOL),
            "Content-Type": MSGPACK,
        }
        limit = self._timeout if seconds is None else aiohttp.ClientTimeout(total=seconds)
        tls = self._tls() if self._tls else True
        try:
            async with self._session.post(
                member.http + path, data=data, headers=headers, timeout=limit, ssl=tls
            ) as response:
                raw = await response.read()
                if response.status >= 300:
                    raise PeerUnavailable(member.name, f"HTTP {response.status}", response.status)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise PeerUnavailable(member.name, str(exc) or type(exc).__name__) from None
        if kind is None:
            return None  # type: ignore[return-value]
        try:
            return msgspec.msgpack.decode(raw, type=kind)
        except msgspec.ValidationError as exc:
            raise PeerUnavailable(member.name, f"bad answer: {exc}") from None
