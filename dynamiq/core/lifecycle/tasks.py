"""Tasks that outlive a restart of their node (a redrive, a replay), run a step at a time.

The task itself is stored by whoever owns it (its state, its progress after
every step); what is here is the running: one asyncio task per key, which
steps while the task's state is ``running``, pauses as each step asks, tries
again shortly when the store fails, and is stopped between two steps (a
step in hand is finished and saved first). A bug ends the task visibly:
whoever owns it marks it failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from dynamiq.errors import DynamiqError

__all__ = ["Runners", "pause"]

log = logging.getLogger("dynamiq.core")

RETRY_SECONDS = 1.0
STOP_SECONDS = 10.0  # how long a stop waits for the step in hand


class Stateful(Protocol):
    @property
    def state(self) -> str: ...


T = TypeVar("T", bound=Stateful)
Step = Callable[[T], Awaitable[tuple[T, float]]]
"""One step of a task: the task as it then stands (saved), and how long to pause."""
Failed = Callable[[T, Exception], Awaitable[None]]
"""What a bug does to a task: it is stored failed."""


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less when asked to stop (``asyncio.timeout``: on 3.11,
    ``wait_for`` swallows a cancellation that arrives as the event is set)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()


class Runners(Generic[T]):
    """The running tasks of one kind (``what``, for the log) on this node, by key."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._running: dict[str, asyncio.Task[None]] = {}
        # Set to stop a runner between two steps (a step taken is always saved).
        self._stops: dict[str, asyncio.Event] = {}

    def running(self) -> list[str]:
        """The keys of the tasks running here now, sorted."""
        return sorted(self._running)

    def spawn(self, key: str, task: T, step: Step[T], failed: Failed[T]) -> None:
        """Run ``task`` under ``key`` until its state is not ``running``."""
        self._stops[key] = asyncio.Event()
        self._running[key] = asyncio.create_task(self._run(key, task, step, failed))

    async def stop(self, keys: list[str]) -> None:
        """Stop the runners of ``keys`` once their step in hand is taken and saved."""
        runners = [(k, self._running.pop(k, None)) for k in keys]
        for key, runner in runners:
            if runner is not None:
                self._stops[key].set()
        for _, runner in runners:
            if runner is not None:
                try:
                    await asyncio.wait_for(runner, STOP_SECONDS)
                except TimeoutError:  # a store that hangs: cancelled (at-least-once still)
                    log.warning("a %s did not stop within %g s", self._what, STOP_SECONDS)

    async def close(self) -> None:
        """Stop every runner here; the tasks stay ``running``, to resume at the next start."""
        await self.stop(list(self._running))

    async def _run(self, key: str, task: T, step: Step[T], failed: Failed[T]) -> None:
        stop = self._stops[key]
        try:
            while task.state == "running" and not stop.is_set():
                try:
                    task, wait = await step(task)
                    if wait > 0:
                        await pause(stop, wait)
                except DynamiqError as exc:  # the store failed: try again shortly
                    log.warning("%s of %s: %s; retrying", self._what, key, exc)
                    await pause(stop, RETRY_SECONDS)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must end the task visibly, not silently
            log.exception("%s of %s failed", self._what, key)
            await failed(task, exc)
        finally:
            if self._running.get(key) is asyncio.current_task():
                del self._running[key]
            if self._stops.get(key) is stop:
                del self._stops[key]
