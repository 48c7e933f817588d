"""Many calls at once: names for many queues, ``count`` calls spread over concurrent
callers, and their rate in each tenth of the run (flat, or falling as something grows)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

__all__ = ["spread", "tenant", "tenths"]


def tenant(i: int) -> str:
    """The name of the ``i``-th queue."""
    return f"tenant-{i:07d}"


async def spread(count: int, clients: int, call: Callable[[int], Awaitable[object]]) -> list[float]:
    """Run ``call(i)`` for every ``i`` below ``count`` from ``clients`` concurrent
    callers; return the rate (calls a second) of each tenth of the run."""
    tenth = max(1, count // 10)
    finished: list[float] = []
    next_i = 0

    async def caller() -> None:
        nonlocal next_i
        while next_i < count:
            i, next_i = next_i, next_i + 1
            await call(i)
            finished.append(time.monotonic())

    started = time.monotonic()
    await asyncio.gather(*(caller() for _ in range(clients)))
    finished.sort()
    rates, before = [], started
    for end in range(tenth, count + 1, tenth):
        at = finished[end - 1]
        rates.append(tenth / max(at - before, 1e-9))
        before = at
    return rates


def tenths(rates: list[float]) -> str:
    """Rates a tenth, as one line."""
    return " ".join(f"{r:,.0f}" for r in rates)
