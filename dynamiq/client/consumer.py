"""What a worker needs of a client: lease, delete, and change leases of one queue."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from dynamiq.models import Message

__all__ = ["Consumer"]


class Consumer(Protocol):
    """The verbs of ``AsyncClient`` a worker and its lease keeper call."""

    async def receive(
        self,
        queue: str,
        max_messages: int = 1,
        *,
        wait_seconds: float = 0.0,
        visibility_timeout: float | None = None,
    ) -> list[Message]:
        """Lease up to ``max_messages`` messages, waiting up to ``wait_seconds`` for one."""
        ...

    async def delete(self, queue: str, ids: Sequence[int]) -> list[int]:
        """Delete messages by id; return the ids that existed."""
        ...

    async def change_visibility(
        self, queue: str, ids: Sequence[int], visibility_timeout: float
    ) -> list[int]:
        """Keep leased messages invisible for ``visibility_timeout`` more seconds (0: end)."""
        ...
