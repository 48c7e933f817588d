"""One POST to an endpoint: what the engine makes of a stored document, and what the
client sends (pure)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Request"]


@dataclass(frozen=True, slots=True)
class Request:
    """One POST to an endpoint."""

    url: str
    headers: dict[str, str]
    body: bytes
    notification: bool = True  # else a subscription's confirmation
