"""Background rounds: a job the engine runs every so many seconds, or sooner when
kicked, until cancelled; a round that fails is logged and tried again at the next."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from dynamiq.errors import DynamiqError

__all__ = ["every"]

log = logging.getLogger("dynamiq.core")


async def every(
    seconds: float,
    job: Callable[[], Awaitable[object]],
    what: str,
    kicked: asyncio.Event | None = None,
) -> None:
    """Run ``job`` now and then every ``seconds`` (or as soon as ``kicked`` is set) until
    cancelled. A round that fails does not end the rounds: a ``DynamiqError`` (the
    store, the cluster) is logged as ``what`` failing, anything else with its
    traceback, and the next round tries again."""
    kicked = kicked or asyncio.Event()  # none given: one nobody sets
    while True:
        try:
            await job()
        except DynamiqError as exc:
            log.warning("%s failed, will retry: %s", what, exc)
        except Exception:  # a bug must not end the rounds: logged, tried again
            log.exception("%s failed, will retry", what)
        # ``asyncio.timeout``, not ``wait_for``: on 3.11 the latter swallows a
        # cancellation that arrives as the kick does, and the rounds would go on.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await kicked.wait()
        kicked.clear()
