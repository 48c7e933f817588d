"""Room for request bodies: bounded bytes, first come first served, a wait that ends."""

from __future__ import annotations

import asyncio

import pytest

from dynamiq.api.intake import Intake
from dynamiq.errors import Overloaded
from tests.waiting import turns


async def test_requests_within_the_limit_are_let_in_at_once_and_the_rest_wait_in_order() -> None:
    intake = Intake(100)
    await intake.take(60)
    await intake.take(40)
    order: list[str] = []

    async def wait(name: str, size: int) -> None:
        await intake.take(size)
        order.append(name)

    big = asyncio.create_task(wait("big", 90))
    await asyncio.sleep(0)
    small = asyncio.create_task(wait("small", 10))
    await turns()
    assert order == [] and intake.held == 100
    intake.give(40)  # room for the small one, but the big one came first
    await turns()
    assert order == []
    intake.give(60)
    await asyncio.gather(big, small)
    assert order == ["big", "small"] and intake.held == 100
    intake.give(90)
    intake.give(10)
    assert intake.held == 0


async def test_a_wait_too_long_is_refused_and_leaves_no_trace() -> None:
    intake = Intake(10)
    await intake.take(10)
    with pytest.raises(Overloaded, match=r"limits\.maxpendingbytes"):
        await intake.take(5, seconds=0.05)
    cancelled = asyncio.create_task(intake.take(5))
    await turns()
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    intake.give(10)
    assert intake.held == 0  # neither the refused nor the cancelled request holds room
    await intake.take(10)
    assert intake.held == 10


async def test_a_body_larger_than_the_limit_waits_for_all_of_it_not_for_ever() -> None:
    intake = Intake(10)
    await intake.take(50)  # held as the whole limit
    assert intake.held == 10
    intake.give(50)
    assert intake.held == 0
