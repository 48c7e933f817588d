"""Keeping leases alive while their messages are being processed.

A consumer that needs longer than the visibility timeout extends its leases
before they end; one that does not would see the message delivered to
another consumer meanwhile. The worker and the Spark streaming source both
run a ``LeaseKeeper``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection

from dynamiq.client.batches import batches
from dynamiq.client.consumer import Consumer
from dynamiq.errors import DynamiqError

__all__ = ["LeaseKeeper"]

log = logging.getLogger("dynamiq.client")


class LeaseKeeper:
    """Extend, a third of the visibility timeout apart, the leases on every id ``held``
    returns, by a whole timeout each time: a lease is never less than two thirds
    of the timeout from its end while it is kept.
    """

    def __init__(
        self,
        client: Consumer,
        queue: str,
        visibility_timeout: float,
        held: Callable[[], Collection[int]],
    ) -> None:
        self._client = client
        self._queue = queue
        self._visibility = visibility_timeout
        self._held = held
        self.lost = 0
        """How many leases had ended when they were to be extended (another
        consumer may have the message now)."""

    async def run(self) -> None:
        """Keep the leases until cancelled."""
        while True:
            await asyncio.sleep(self._visibility / 3)
            await self.extend()

    async def extend(self) -> None:
        """Extend every held lease now, counting those that had ended in ``lost``."""
        try:
            for batch in batches(list(self._held())):
                changed = await self._client.change_visibility(self._queue, batch, self._visibility)
                self.lost += len(batch) - len(changed)
        except DynamiqError as exc:  # tried again a third of a timeout later
            log.warning("could not extend leases on %s: %s", self._queue, exc)
