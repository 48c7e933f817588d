"""Queue depths on Riak: one CRDT counter per bucket, moved by coalesced deltas.

A write batch's delta is queued, not awaited: one update per bucket is in
flight at a time and the deltas that arrive meanwhile leave together in the
next one. A publish or a delete is therefore not held up by a second write,
and the counter's key (the same for every node) sees about one update per
round trip instead of one per batch. The price is a window: a node killed
with deltas queued or in flight leaves the counter off by them (a graceful
stop sends them). ``count`` first sends what is queued, so a node reads its
own writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from dynamiq.errors import BackendUnavailable

__all__ = ["DepthDeltas"]

log = logging.getLogger("dynamiq.storage")

Send = Callable[[str, int], Awaitable[None]]


class DepthDeltas:
    """Counter deltas per bucket, sent one update per bucket at a time."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._pending: dict[str, int] = {}
        self._senders: dict[str, asyncio.Task[None]] = {}

    def add(self, bucket: str, delta: int) -> None:
        """Queue ``delta`` for ``bucket``'s counter; it is sent in the background."""
        if delta:
            self._pending[bucket] = self._pending.get(bucket, 0) + delta
            if bucket not in self._senders:
                self._senders[bucket] = asyncio.create_task(self._drain(bucket))

    async def settle(self, bucket: str) -> None:
        """Return once every delta queued for ``bucket`` so far is stored.

        Raises:
            BackendUnavailable: when Riak would not take them (they stay queued).
        """
        sender = self._senders.get(bucket)
        if sender is not None:
            await asyncio.shield(sender)
        delta = self._pending.pop(bucket, 0)
        if delta:
            try:
                await self._send(bucket, delta)
            except BaseException:
                self._pending[bucket] = self._pending.get(bucket, 0) + delta
                raise

    def retry(self) -> None:
        """Send again, in the background, what earlier failures left queued."""
        for bucket in list(self._pending):
            if bucket not in self._senders:
                self._senders[bucket] = asyncio.create_task(self._drain(bucket))

    async def close(self) -> None:
        """Send what is queued (best effort: what Riak refuses is logged, then dropped)."""
        for bucket in {*self._pending, *self._senders}:
            try:
                await self.settle(bucket)
            except BackendUnavailable as exc:
                lost = self._pending.get(bucket, 0)
                log.warning("depth counter of %s left off by %d: %s", bucket, lost, exc)
        self._pending.clear()
        for sender in list(self._senders.values()):  # each removes itself when it ends
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, BackendUnavailable):
                await sender

    async def _drain(self, bucket: str) -> None:
        try:
            while delta := self._pending.pop(bucket, 0):
                try:
                    await self._send(bucket, delta)
                except BackendUnavailable as exc:
                    # Kept for the next write, count or housekeeping round.
                    self._pending[bucket] = self._pending.get(bucket, 0) + delta
                    log.warning("depth counter of %s not updated yet: %s", bucket, exc)
                    return
        finally:
            self._senders.pop(bucket, None)
