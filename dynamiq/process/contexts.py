"""Cleanup contexts: how the app starts what a node runs and stops it, in one order.

aiohttp enters them in order at start-up and leaves them in reverse at
cleanup, going on when one fails to stop, so every resource is released.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine

from aiohttp import web

__all__ = ["STOP_AGAIN_SECONDS", "Context", "owned", "started", "task", "trim_memory_loop"]

STOP_AGAIN_SECONDS = 1.0  # a background loop still running this long after its cancel

Context = Callable[[web.Application], AsyncIterator[None]]


def owned(
    start: Callable[[], Awaitable[object]] | None, stop: Callable[[], Awaitable[None]] | None
) -> Context:
    """Return a cleanup context that runs ``start`` at start-up and ``stop`` at cleanup."""

    async def ctx(_: web.Application) -> AsyncIterator[None]:
        if start is not None:
            await start()
        yield
        if stop is not None:
            await stop()

    return ctx


def task(loop_fn: Callable[[], Coroutine[None, None, None]]) -> Context:
    """Return a cleanup context that runs ``loop_fn`` as a task, cancelled at cleanup."""

    async def ctx(_: web.Application) -> AsyncIterator[None]:
        running = asyncio.create_task(loop_fn())
        yield
        running.cancel()
        # Asked again while it runs: a call in the loop's path may swallow a
        # cancellation that arrives as it finishes (one did in upkeep on a Redis
        # Cluster, and the node's shutdown waited for the loop forever).
        while not (await asyncio.wait({running}, timeout=STOP_AGAIN_SECONDS))[0]:
            running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running

    return ctx


def started(start: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    """Return ``start`` as a coroutine function, for a context's start."""

    async def run() -> None:
        start()

    return run


async def trim_memory_loop(interval: float = 10.0) -> None:
    """Hand freed heap memory back to the OS now and then (glibc keeps it otherwise).

    Bursts (large batches, the recent-records cache) leave free memory in
    malloc's arenas; without this RSS shows the high-water mark, not what the
    node holds.
    """
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return  # not glibc
    while True:
        await asyncio.sleep(interval)
        trim(0)
