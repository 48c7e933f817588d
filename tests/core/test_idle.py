"""Auto-deleting queues, in fake time: deleted once unused for their window (plus the
rounds a use may take to reach the store), kept by use through any engine."""

from __future__ import annotations

import asyncio
import logging

import pytest

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.janitor import Janitor
from dynamiq.core.lifecycle.idle import SLACK_ROUNDS
from dynamiq.core.queues import QueueService
from dynamiq.models import QueueSettings
from dynamiq.storage.lmdb import LmdbBackend

ROUND = 2.0
WINDOW = 60.0
SLACK = SLACK_ROUNDS * ROUND


class Node:
    """One engine's catalog, queues and upkeep on a shared store."""

    def __init__(self, store: LmdbBackend, clock: FakeClock) -> None:
        self.catalog = Catalog(store)
        self.queues = QueueService(store, clock=clock, catalog=self.catalog)
        self.janitor = Janitor(self.queues, ROUND)

    async def round(self) -> None:
        await self.janitor.run_once()


async def test_an_unused_queue_goes_when_its_window_and_the_slack_have_passed(
    store: LmdbBackend, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "dynamiq.core")
    node = Node(store, fake_clock)
    await node.catalog.create_queue("staging", QueueSettings(expires_after_seconds=WINDOW))
    await node.catalog.create_queue("kept")
    await node.janitor.idle.changed("staging")
    await node.queues.publish("staging", [b"x"])
    deadline = node.janitor.idle.expires_at("staging")
    assert deadline == fake_clock.wall_ms() + (WINDOW + SLACK) * 1000
    assert node.janitor.idle.expires_at("kept") is None
    fake_clock.advance(WINDOW + SLACK - 0.001)
    await node.round()
    assert node.catalog.queues() == ["kept", "staging"]
    fake_clock.advance(0.001)
    await node.round()
    assert node.catalog.queues() == ["kept"]
    assert "queue staging deleted: unused for 60s" in caplog.text
    assert await store.meta_scan("a/") == {}  # its record of use went with it
    assert await store.meta_scan("drop/") == {}  # and its messages


async def test_use_through_another_engine_keeps_a_queue(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    one, two = Node(store, fake_clock), Node(store, fake_clock)
    await one.catalog.create_queue("q", QueueSettings(expires_after_seconds=WINDOW))
    await one.janitor.idle.changed("q")
    await two.catalog.reload()
    for _ in range(3):  # used through two only, each time just inside the window
        fake_clock.advance(WINDOW - 1)
        two.janitor.idle.used(["q"])
        await two.round()  # writes the use
        await one.round()
        assert one.catalog.queues() == ["q"]
    expected = fake_clock.wall_ms() + (WINDOW + SLACK) * 1000
    assert one.janitor.idle.expires_at("q") == two.janitor.idle.expires_at("q") == expected
    fake_clock.advance(WINDOW + SLACK)
    await one.round()
    assert one.catalog.queues() == []
    await two.round()
    assert two.catalog.queues() == []


async def test_a_settings_change_is_a_use_and_turning_it_off_keeps_the_queue(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    node = Node(store, fake_clock)
    await node.catalog.create_queue("q", QueueSettings(expires_after_seconds=WINDOW))
    await node.round()  # a queue without a recorded use starts now
    fake_clock.advance(WINDOW)
    await node.catalog.configure_queue("q", {"visibility_timeout": 5.0})
    await node.janitor.idle.changed("q")
    fake_clock.advance(SLACK + 1)
    await node.round()
    assert node.catalog.queues() == ["q"]
    await node.catalog.configure_queue("q", {"expires_after_seconds": None})
    fake_clock.advance(10 * WINDOW)
    await node.round()
    assert node.catalog.queues() == ["q"] and node.janitor.idle.expires_at("q") is None


async def test_a_dead_letter_queue_in_use_is_kept(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    node = Node(store, fake_clock)
    await node.catalog.create_queue("dlq", QueueSettings(expires_after_seconds=WINDOW))
    await node.catalog.create_queue(
        "q", QueueSettings(max_receives=3, dead_letter_queue="dlq", expires_after_seconds=WINDOW)
    )
    await node.round()
    fake_clock.advance(WINDOW + SLACK)
    node.janitor.idle.used(["q"])
    await node.round()
    assert node.catalog.queues() == ["dlq", "q"]
    fake_clock.advance(WINDOW + SLACK)
    await node.round()
    assert node.catalog.queues() == ["dlq"]
    await node.round()  # dlq is nobody's dead-letter queue now: its time starts
    fake_clock.advance(WINDOW + SLACK - 1)
    await node.round()
    assert node.catalog.queues() == ["dlq"]
    fake_clock.advance(1)
    await node.round()
    assert node.catalog.queues() == []


async def test_a_restarted_engine_keeps_the_last_use_it_finds(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    node = Node(store, fake_clock)
    await node.catalog.create_queue("q", QueueSettings(expires_after_seconds=WINDOW))
    await node.janitor.idle.changed("q")
    deadline = node.janitor.idle.expires_at("q")
    fake_clock.advance(WINDOW / 2)
    restarted = Node(store, fake_clock)
    await restarted.round()  # reads the use on record: its clock does not start again
    assert restarted.janitor.idle.expires_at("q") == deadline
    fake_clock.advance(WINDOW / 2 + SLACK)
    await restarted.round()
    assert restarted.catalog.queues() == []


async def test_the_upkeep_loop_ends_when_cancelled_in_the_turn_it_is_kicked(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    # A queue deleted as the node stops: the kick and the cancellation arrive together.
    # (``asyncio.wait_for`` on 3.11 swallowed such a cancellation and the loop went on,
    # so the node's shutdown waited for it forever.)
    node = Node(store, fake_clock)
    for _ in range(20):
        running = asyncio.create_task(node.janitor.janitor_loop())
        for _ in range(5):  # a round, then into its wait
            await asyncio.sleep(0.01)
        node.janitor.kick()
        await asyncio.sleep(0)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(running, 5)
