"""Waiting on conditions, not on time: poll a predicate until it holds, with a deadline.

A test that sleeps and then asserts is either slow (the sleep is long enough
everywhere) or flaky (it is not, somewhere). These return as soon as what the
test waits for has happened, and fail the test, saying what did not happen,
when it has not by the deadline. The deadline is a guard against hanging, not
a measurement: what something takes is the benches' to report.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

__all__ = ["eventually", "until"]

T = TypeVar("T")


def until(
    check: Callable[[], T | None],
    timeout: float = 10.0,
    step: float = 0.02,
    what: str = "",
    explain: Callable[[], str] | None = None,
) -> T:
    """Call ``check`` until it returns something true; return that. Fails the test
    after ``timeout`` seconds, naming ``what`` was awaited and adding what
    ``explain()`` tells of the state it was left in."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            said = f"not within {timeout} s: {what or check}"
            pytest.fail(f"{said}\n{explain()}" if explain else said, pytrace=False)
        time.sleep(step)
    return found


def within(check: Callable[[], object], timeout: float, step: float = 0.02) -> bool:
    """Call ``check`` until it returns something true, for at most ``timeout`` seconds;
    return whether it did (for a wait that may end either way: ``until`` fails)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


async def eventually(
    check: Callable[[], Awaitable[T | None]],
    within: float = 10.0,
    step: float = 0.01,
    what: str = "",
) -> T:
    """Await ``check()`` until it gives something true; return that. Fails the test
    after ``within`` seconds, naming ``what`` was awaited."""
    deadline = time.monotonic() + within
    while not (found := await check()):
        if time.monotonic() > deadline:
            pytest.fail(f"not within {within} s: {what or check}", pytrace=False)
        await asyncio.sleep(step)
    return found


async def soon(
    check: Callable[[], T | None], within: float = 10.0, step: float = 0.01, what: str = ""
) -> T:
    """``eventually`` for a plain predicate, from async code: a state this event loop's
    own tasks change (a server's in the test's process)."""

    async def ask() -> T | None:
        return check()

    return await eventually(ask, within, step, what or str(check))


async def turns(count: int = 5) -> None:
    """Let the event loop run ``count`` rounds: enough for every task already woken to
    act, for a check that something did *not* happen (no time passes on a fake clock)."""
    for _ in range(count):
        await asyncio.sleep(0)
