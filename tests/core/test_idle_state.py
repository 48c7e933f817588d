"""A queue's state is let go when it has been idle and holds nothing the store does not,
and made again on next use: a queue whose state is dropped whenever it may be behaves
exactly as one that keeps it (leases, delays, groups, deduplication, receive counts),
checked against it over random plans; a state that holds something is kept."""

from __future__ import annotations

from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from dynamiq.core.clock import FakeClock
from dynamiq.core.queues import QueueService
from dynamiq.models import Message, Outgoing, QueueSettings
from dynamiq.storage.lmdb import LmdbBackend
from tests.core.fresh import on_fresh_store, one_queue

LEASE = 5.0
SETTINGS = QueueSettings(visibility_timeout=LEASE, dedup_window_seconds=60)

ops = st.lists(
    st.tuples(
        st.sampled_from(["publish", "receive", "delete", "nack", "lapse", "wait"]),
        st.integers(0, 5),
    ),
    max_size=30,
)


class _Twin:
    """One engine on its own store and clock, what its consumer holds, and the checks
    any queue must pass whatever its state went through: nothing handed out while
    leased or before it is due, receive counts that count, groups in order."""

    def __init__(self, queues: QueueService, clock: FakeClock, drops: bool) -> None:
        self.queues, self.clock, self.drops = queues, clock, drops
        self.held: dict[bytes, int] = {}  # body -> id, leased by the test's consumer
        self.leased_until: dict[bytes, float] = {}
        self.due: dict[bytes, float] = {}
        self.deliveries: dict[bytes, int] = {}
        self.gone: set[bytes] = set()  # deleted
        self.groups: dict[str, list[bytes]] = {}  # stored, in order, by group
        self.dropped = 0

    def delivered(self, got: list[Message]) -> None:
        now = self.clock.now()
        for m in got:
            assert m.body not in self.gone, m.body
            assert self.leased_until.get(m.body, 0.0) <= now, f"{m.body!r} leased twice"
            assert self.due[m.body] <= now + 1e-6, f"{m.body!r} before it was due"
            self.deliveries[m.body] = self.deliveries.get(m.body, 0) + 1
            assert m.receive_count == self.deliveries[m.body], (m.body, m.receive_count)
            self.leased_until[m.body] = now + LEASE
        for group in {m.group for m in got if m.group is not None}:
            # What a group handed out (and is not deleted) is its oldest messages.
            waiting = [b for b in self.groups[group] if b not in self.gone]
            out = [b for b in waiting if self.deliveries.get(b)]
            assert waiting[: len(out)] == out, f"group {group} out of order: {out}"

    async def step(self, op: str, arg: int, n: int) -> object:
        """Run one step; return what is decided without chance (what was stored)."""
        queues = self.queues
        seen: object = None
        if op == "publish":
            batch = [
                Outgoing(
                    b"m%d" % (n + i),
                    group=["a", "b", None][(n + i) % 3],
                    dedup_id=f"d{(n + i) % 7}",  # repeats: some are duplicates
                    delay_seconds=None if (n + i) % 3 != 2 else float(arg % 3),
                )
                for i in range(arg + 1)
            ]
            published = await queues.publish("q", batch)
            stored = [not dup for dup in published.duplicate or [False] * len(batch)]
            for out, kept in zip(batch, stored, strict=True):
                if kept:
                    self.due[out.body] = self.clock.now() + (out.delay_seconds or 0.0)
                    if out.group is not None:
                        self.groups.setdefault(out.group, []).append(out.body)
            seen = stored
        elif op == "receive":
            got = await queues.receive("q", arg + 1)
            self.delivered(got)
            self.held.update((m.body, m.id) for m in got)
        elif op in ("delete", "nack") and self.held:
            body = sorted(self.held)[arg % len(self.held)]
            mid = self.held.pop(body)
            if op == "delete":
                assert await queues.delete("q", [mid]) == [True]
                self.gone.add(body)
            else:
                assert await queues.change_visibility("q", [mid], 0) == [mid]
                self.leased_until[body] = self.clock.now()
        elif op == "lapse":
            self.clock.advance(LEASE)
            self.held.clear()
        elif op == "wait":
            self.clock.advance(0.5 + arg)
            now = self.clock.now()
            self.held = {b: i for b, i in self.held.items() if self.leased_until[b] > now}
        self.clock.advance(0.01)
        if self.drops:
            self.dropped += queues.states.drop_idle(0.0)
        return seen


def _compare(plan: list[tuple[str, int]]) -> int:
    """Run ``plan`` on a queue that keeps its state and on one that drops it whenever it
    may; both pass the checks, store the same and give back the same when drained;
    return how often a state was dropped."""
    outcomes: list[list[object]] = []
    dropped = 0

    async def run(drops: bool, store: LmdbBackend) -> None:
        nonlocal dropped
        clock = FakeClock()
        # One queue uid in both: a deduplicated message's stripe follows it, and of
        # messages due at one moment a receive of a few takes the lower stripes'.
        with patch("secrets.token_hex", return_value="0123456789abcdef"):
            queues = await one_queue(store, clock, SETTINGS)
        twin = _Twin(queues, clock, drops)
        seen = [await twin.step(op, arg, i * 10) for i, (op, arg) in enumerate(plan)]
        clock.advance(LEASE + 3)  # leases lapse, delays come due: drain it all
        rest: list[bytes] = []
        while got := await twin.queues.receive("q", 10):
            twin.delivered(got)
            rest += [m.body for m in got]
            await twin.queues.delete("q", [m.id for m in got])
            twin.gone.update(m.body for m in got)
        outcomes.append([*seen, sorted(rest)])
        dropped += twin.dropped

    on_fresh_store(lambda store: run(False, store))
    on_fresh_store(lambda store: run(True, store))
    assert outcomes[0] == outcomes[1]
    return dropped


@settings(max_examples=60, deadline=None)
@given(ops)
def test_a_queue_whose_state_is_dropped_behaves_as_one_that_keeps_it(
    plan: list[tuple[str, int]],
) -> None:
    _compare(plan)


def test_the_comparison_drops_states_indeed() -> None:
    cycle = [("publish", 2), ("wait", 3), ("receive", 5), ("delete", 0), ("delete", 0)]
    cycle += [("delete", 0), ("wait", 1)]
    plan = cycle * 4 + [("publish", 5), ("receive", 2), ("nack", 0), ("lapse", 0)] + cycle
    assert _compare(plan) >= 4


async def test_a_state_is_dropped_only_when_idle_and_quiet(store: LmdbBackend) -> None:
    clock = FakeClock()
    queues = await one_queue(store, clock, SETTINGS)
    await queues.publish("q", [b"a", b"b"])
    [leased] = await queues.receive("q", 1)
    clock.advance(2)
    assert queues.states.drop_idle(1.0) == 0  # a lease is held: kept
    await queues.delete("q", [leased.id])
    assert queues.states.drop_idle(10.0) == 0  # quiet, but used 2 s ago
    clock.advance(10)
    assert queues.states.drop_idle(10.0) == 1
    assert [m.body for m in await queues.receive("q", 5)] == [b"b"]  # made again
