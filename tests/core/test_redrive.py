"""Redrive on a real LMDB store: messages go back to their source, once, across restarts."""

from __future__ import annotations

import pytest

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.lifecycle.redrive import Redriver, RedriveTask
from dynamiq.core.queues import QueueService
from dynamiq.errors import Invalid, QueueNotFound, RedriveRunning
from dynamiq.models import QueueSettings
from dynamiq.storage.lmdb import LmdbBackend
from tests.waiting import eventually

DEAD = QueueSettings(visibility_timeout=1, max_receives=1, dead_letter_queue="dlq")


async def _engine(store: LmdbBackend, clock: FakeClock) -> tuple[QueueService, Redriver]:
    catalog = Catalog(store)
    await catalog.reload()
    queues = QueueService(store, catalog, clock)
    redriver = Redriver(queues.context, "n1", queues.states, queues.life)
    return queues, redriver


async def _dead_letters(queues: QueueService, clock: FakeClock, queue: str, n: int) -> None:
    """Publish ``n`` messages to ``queue`` and let each one's only lease lapse."""
    await queues.publish(queue, [b"%s-%d" % (queue.encode(), i) for i in range(n)])
    while await queues.receive(queue, 100):
        pass
    clock.advance(1)
    await queues.sweep()


async def _settled(redriver: Redriver, queue: str) -> RedriveTask:
    async def ended() -> RedriveTask | None:
        task = await redriver.status(queue)
        return task if task is not None and task.state != "running" else None

    return await eventually(ended, what="the redrive's end")


async def _moved_some(redriver: Redriver, queue: str, count: int = 1) -> None:
    async def moved() -> bool:
        task = await redriver.status(queue)
        return task is not None and task.moved >= count

    await eventually(moved, what=f"a redrive that moved {count}")


async def _none_running(redriver: Redriver) -> bool:
    return not redriver.running()


@pytest.fixture
async def engine(store: LmdbBackend, fake_clock: FakeClock) -> tuple[QueueService, Redriver]:
    catalog = Catalog(store)
    await catalog.create_queue("dlq")
    await catalog.create_queue("a", DEAD)
    await catalog.create_queue("b", DEAD)
    return await _engine(store, fake_clock)


async def test_a_redrive_sends_each_message_back_to_its_source_with_a_new_life(
    engine: tuple[QueueService, Redriver], fake_clock: FakeClock
) -> None:
    queues, redriver = engine
    await _dead_letters(queues, fake_clock, "a", 120)
    await _dead_letters(queues, fake_clock, "b", 30)
    assert (await queues.stats("dlq")).depth == 150
    task = await redriver.start("dlq", None, None)
    assert task.state == "running"
    done = await _settled(redriver, "dlq")
    assert (done.state, done.moved, done.skipped) == ("done", 150, 0)
    assert (await queues.stats("dlq")).depth == 0
    back = await queues.receive("a", 200) + await queues.receive("b", 200)
    assert sorted(m.body for m in back) == sorted(
        [b"a-%d" % i for i in range(120)] + [b"b-%d" % i for i in range(30)]
    )
    assert {(m.receive_count, m.dead_letter) for m in back} == {(1, None)}
    assert (await queues.stats("dlq", detailed=True)).here.redriven == 150


async def test_a_redrive_to_a_named_queue_and_one_whose_source_is_gone(
    engine: tuple[QueueService, Redriver], store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues, redriver = engine
    await _dead_letters(queues, fake_clock, "a", 3)
    await _dead_letters(queues, fake_clock, "b", 2)
    await queues._catalog.delete_queue("b")
    done = await _settled(redriver, (await redriver.start("dlq", None, None)).queue)
    assert (done.moved, done.skipped) == (3, 2)  # b's two stay where they are
    await queues._catalog.create_queue("parking")
    done = await _settled(redriver, (await redriver.start("dlq", "parking", None)).queue)
    assert done.moved == 2
    assert sorted(m.body for m in await queues.receive("parking", 10)) == [b"b-0", b"b-1"]


async def test_a_redrive_resumes_after_a_restart_and_moves_nothing_twice(
    engine: tuple[QueueService, Redriver], store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues, redriver = engine
    await _dead_letters(queues, fake_clock, "a", 250)
    await redriver.start("dlq", None, max_per_second=400)  # 100 a batch: 0.25 s apart
    await _moved_some(redriver, "dlq", 100)
    await redriver.close()  # the node stops mid-way
    stopped = await redriver.status("dlq")
    assert stopped is not None and stopped.state == "running" and stopped.moved < 250
    _, again = await _engine(store, fake_clock)
    await again.resume()
    done = await _settled(again, "dlq")
    assert (done.state, done.moved) == ("done", 250)
    bodies = [m.body for m in await queues.peek_many("a", 1000)]
    assert len(bodies) == len(set(bodies)) == 250


async def test_a_cancelled_redrive_stops_and_keeps_what_it_moved(
    engine: tuple[QueueService, Redriver], fake_clock: FakeClock
) -> None:
    queues, redriver = engine
    await _dead_letters(queues, fake_clock, "a", 300)
    await redriver.start("dlq", None, max_per_second=200)
    with pytest.raises(RedriveRunning):
        await redriver.start("dlq", None, None)
    await _moved_some(redriver, "dlq")
    cancelled = await redriver.cancel("dlq")
    assert cancelled is not None and cancelled.state == "cancelled"
    assert redriver.running() == []  # stopped once its batch in hand was saved
    final = await redriver.status("dlq")
    assert final is not None and final.state == "cancelled"
    left = (await queues.stats("dlq")).depth
    assert 0 < left < 300 and left + (await queues.stats("a")).depth == 300


async def test_a_redrive_checks_where_it_goes(engine: tuple[QueueService, Redriver]) -> None:
    _, redriver = engine
    with pytest.raises(QueueNotFound):
        await redriver.start("nope", None, None)
    with pytest.raises(QueueNotFound):
        await redriver.start("dlq", "nope", None)
    with pytest.raises(Invalid):
        await redriver.start("dlq", "dlq", None)
    assert await redriver.status("dlq") is None


async def test_a_cancel_from_another_node_stops_the_runner_and_keeps_its_count(
    engine: tuple[QueueService, Redriver], store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues, redriver = engine
    await _dead_letters(queues, fake_clock, "a", 300)
    await redriver.start("dlq", None, max_per_second=400)  # 100 a batch, 0.25 s apart
    _, other = await _engine(store, fake_clock)  # another node, on the same store
    await _moved_some(redriver, "dlq")
    cancelled = await other.cancel("dlq")
    assert cancelled is not None and cancelled.state == "cancelled"
    # The runner reads the state before its next batch, and ends
    await eventually(lambda: _none_running(redriver), what="the runner's end")
    final = await redriver.status("dlq")
    assert final is not None and final.state == "cancelled"
    left = (await queues.stats("dlq")).depth
    assert final.moved == 300 - left and 0 < left < 300
