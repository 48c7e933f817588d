"""Messages leased for one answer, and whether they may still be handed out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from dynamiq.models import Message

__all__ = ["Leased"]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Leased:
    """What a receive leased. A process that stood still after leasing (long enough
    for the others to serve its slice) must not hand out what they may have leased
    meanwhile: ``answer`` looks at that last, just before the answer is written."""

    messages: list[Message]
    holds: Callable[[], bool]  # whether the leases are still good

    def answer(self, render: Callable[[list[Message]], R]) -> R:
        """Return ``render`` of the messages, or of none when their leases are void."""
        rendered = render(self.messages)
        if self.messages and not self.holds():
            return render([])
        return rendered
