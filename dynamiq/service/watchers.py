"""Peers waiting on a queue: told when this node stores messages of it.

A peer whose waiting receive asked this node and found nothing is told of
the next messages stored here, for ``WATCH_SECONDS``: it asks again (and so
asks to be told) at least every ``PEER_POLL_SECONDS`` while it waits.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from dynamiq.service.owners import quietly
from dynamiq.service.reach import Reach

__all__ = ["PEER_POLL_SECONDS", "Watchers"]

# A waiting receive looks at its peers' slices this often.
PEER_POLL_SECONDS = 0.5
WATCH_SECONDS = 2 * PEER_POLL_SECONDS


class Watchers:
    """Per queue, the peers to tell of the next messages stored here, until when."""

    def __init__(self, reach: Reach) -> None:
        self._reach = reach
        self._watching: dict[str, dict[str, float]] = {}

    def watch(self, queue: str, member: str) -> None:
        """Tell ``member`` of the next messages of ``queue`` stored here, for a while."""
        self._watching.setdefault(queue, {})[member] = time.monotonic() + WATCH_SECONDS

    def tell(self, queues: Iterable[str]) -> None:
        """Tell the peers waiting on any of ``queues`` that this node stored some there
        (once each)."""
        if self._watching:  # a wide fan-out meets no one waiting: one look at the table
            for queue in self._watching.keys() & queues:
                self._tell(queue)

    def _tell(self, queue: str) -> None:
        watchers = self._watching.pop(queue, None)
        client = self._reach.client
        if watchers and client is not None:
            now, me = time.monotonic(), self._reach.me()
            for member in self._reach.peers():
                if watchers.get(member.name, 0.0) > now:
                    self._reach.spawn(quietly(client.news(member, queue, me)))
