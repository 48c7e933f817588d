"""Ordered groups: one batch of a group in flight at a time, in publish order, under
random receives, deletes, nacks and lapses in fake time."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dynamiq.core.clock import FakeClock
from dynamiq.core.delivery.groups import Groups, group_stripe
from dynamiq.core.ids import SEQ_BITS
from dynamiq.core.queues import QueueService
from dynamiq.keyspace import ID_MAX, WHOLE
from dynamiq.models import HeldLease, Message, Outgoing, QueueSettings, RetryBackoff
from dynamiq.storage.lmdb import LmdbBackend
from tests.core.fresh import on_fresh_store, one_queue, two_engines

LEASE = 10.0
GROUPS = ["a", "b", "c"]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("receive"), st.integers(1, 5)),
        st.tuples(st.just("delete"), st.integers(0, 4)),
        st.tuples(st.just("nack"), st.integers(0, 4)),
        st.tuples(st.just("lapse"), st.just(0)),
        st.tuples(st.just("publish"), st.integers(1, 4)),
    ),
    max_size=40,
)


class Model:
    """What a consumer may see: per group, its messages not deleted, in publish order,
    and the one in flight."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.pending: dict[str | None, list[int]] = {}
        self.in_flight: dict[int, float] = {}  # id: lease deadline
        self.group_of: dict[int, str | None] = {}

    def published(self, ids: list[int], groups: list[str | None]) -> None:
        for mid, group in zip(ids, groups, strict=True):
            self.pending.setdefault(group, []).append(mid)
            self.group_of[mid] = group

    def received(self, got: list[Message]) -> None:
        now = self.clock.now()
        batches: dict[str, list[int]] = {}
        for m in got:
            group = self.group_of[m.id]
            assert m.group == group
            if group is not None:
                batches.setdefault(group, []).append(m.id)
        for group, ids in batches.items():
            assert ids == self.pending[group][: len(ids)], "not the group's oldest, in order"
            others = [
                i
                for i, deadline in self.in_flight.items()
                if self.group_of[i] == group and i not in ids and deadline > now
            ]
            assert not others, "a group's messages while others of it are in flight"
        for m in got:
            self.in_flight[m.id] = now + LEASE

    def deleted(self, mid: int) -> None:
        self.pending[self.group_of[mid]].remove(mid)
        self.in_flight.pop(mid, None)

    def left(self) -> int:
        return sum(len(ids) for ids in self.pending.values())


@settings(max_examples=80, deadline=None)
@given(ops, st.integers(1, 4), st.booleans())
def test_a_group_is_served_in_order_a_batch_at_a_time(
    plan: list[tuple[str, int]], parts: int, backoff: bool
) -> None:
    """Over 1-4 partitions, with or without a retry backoff (a lapsed message is held
    back a while: its group waits for it)."""

    async def main(store: LmdbBackend) -> None:
        clock = FakeClock()
        settings_ = QueueSettings(
            visibility_timeout=LEASE,
            min_partitions=parts,
            max_partitions=parts,
            retry_backoff=RetryBackoff(initial_seconds=3.0) if backoff else None,
        )
        queues = await one_queue(store, clock, settings_)
        model = Model(clock)
        n = 0

        async def publish(count: int) -> None:
            nonlocal n
            groups = [[*GROUPS, None][(n + i) % 4] for i in range(count)]
            batch = [Outgoing(b"m%d" % (n + i), group=g) for i, g in enumerate(groups)]
            n += count
            model.published(await queues.publish("q", batch), groups)

        await publish(6)
        for op, arg in plan:
            live = sorted(i for i, d in model.in_flight.items() if d > clock.now())
            if op == "receive":
                model.received(await queues.receive("q", arg))
            elif op == "publish":
                await publish(arg)
            elif op == "lapse":
                clock.advance(LEASE)
            elif live:
                mid = live[arg % len(live)]
                if op == "delete":
                    assert await queues.delete("q", [mid]) == [True]
                    model.deleted(mid)
                else:
                    assert await queues.change_visibility("q", [mid], 0) == [mid]
                    model.in_flight.pop(mid)
        # Everything left is served in the end, in order.
        for _ in range(4 * n + 4):
            if not model.left():
                break
            got = await queues.receive("q", 3)
            model.received(got)
            if not got:
                clock.advance(LEASE)
            for m in got:
                await queues.delete("q", [m.id])
                model.deleted(m.id)
        assert model.left() == 0

    on_fresh_store(main)


async def test_a_groups_messages_share_one_stripe(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    queues = await one_queue(store, fake_clock)
    ids: list[int] = []
    for i in range(20):
        ids += await queues.publish("q", [Outgoing(b"%d" % i, group="customer-7")])
    assert {mid >> 55 for mid in ids} == {group_stripe("customer-7")}
    assert ids == sorted(ids)


async def test_a_handed_over_lease_keeps_its_group_waiting(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    one, two = await two_engines(store, fake_clock)
    await one.publish("q", [Outgoing(b"1", group="g"), Outgoing(b"2", group="g")])
    fake_clock.advance(0.001)  # both due for the other engine too (a burst draws ahead)
    (first,) = await one.receive("q", 1)
    held = await one.custody.export(0, (1 << 63) - 1)
    assert held == {"q": [HeldLease(first.id, 30.0, 1, first.first_received_ms, "g")]}
    two.custody.take_over("q", held["q"])
    assert await two.receive("q", 10) == []  # the first is in flight elsewhere
    await two.delete("q", [first.id])
    (second,) = await two.receive("q", 10)
    assert second.body == b"2"


async def test_an_older_lease_taken_over_does_not_displace_the_groups_head(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    # Given a group whose first message was deleted and whose second is in flight
    one, _ = await two_engines(store, fake_clock)
    await one.publish("q", [Outgoing(b"%d" % i, group="g") for i in range(1, 4)])
    (first,) = await one.receive("q", 1)
    assert await one.delete("q", [first.id]) == [True]
    (second,) = await one.receive("q", 1)
    assert second.body == b"2"
    # When a lease on the first comes back from a lease journal (it keeps a lease
    # until it would have ended, deleted or not), and ends
    one.custody.take_over("q", [HeldLease(first.id, 1.0, 1, first.first_received_ms, "g")])
    fake_clock.advance(2.0)
    # Then the third still waits for the second
    assert await one.receive("q", 10) == []
    assert await one.delete("q", [second.id]) == [True]
    assert [m.body for m in await one.receive("q", 10)] == [b"3"]


def test_leases_taken_over_on_one_group_join_its_front() -> None:
    groups = Groups()
    groups.taken_over("g", 7)
    groups.taken_over("g", 5)  # handed out with 7 (or deleted: its lapse reads it)
    assert groups.group_of(7) == "g" and groups.group_of(5) == "g"
    assert groups.front_of(Message(8, b"", group="g")) == [5, 7]
    # the group waits for its front: 8 is held
    eight = Message(8, b"", group="g")
    assert groups.admit([eight], leased={5, 7}) == ([], [eight])


def test_a_walk_hands_out_a_groups_messages_in_order_and_holds_the_rest() -> None:
    groups = Groups()
    msgs = [Message(i, b"", group="g" if i < 5 else None) for i in range(1, 6)]
    out, held = groups.admit(msgs, leased=set())
    assert [m.id for m in out] == [1, 2, 3, 4, 5] and held == []
    assert groups.front_of(msgs[0]) == [1, 2, 3, 4]
    later = [Message(i, b"", group="g") for i in range(6, 9)]
    assert groups.admit(later, leased={1, 2, 3, 4}) == ([], later)  # the front is out
    assert 6 in groups and 8 in groups
    assert groups.ended([1, 2, 3]) == []  # 4 is out still
    assert groups.ended([4]) == [6, 7, 8]  # offered again, and 6 leads already
    assert groups.front_of(msgs[0]) == [6] and 6 not in groups and 7 not in groups
    # A walk that meets 7 without 6 (it took only a few, or passed 6 by while it
    # waited) holds 7: 6 comes first.
    assert groups.admit([later[1]], leased=set()) == ([], [later[1]])
    assert groups.admit(later, leased=set()) == (later, [])
    assert groups.front_of(later[0]) == [6, 7, 8]
    assert groups.ended([5, 6, 7, 8]) == [] and not groups


def test_a_lapsed_front_comes_back_in_order_once_none_of_it_is_in_flight() -> None:
    groups = Groups()
    msgs = [Message(i, b"", group="g") for i in range(1, 5)]
    assert groups.admit(msgs[:2], leased=set()) == (msgs[:2], [])
    assert groups.admit(msgs[2:], leased={1, 2}) == ([], msgs[2:])  # waiting behind
    # 1 lapsed and met again while 2 is in flight: it waits for 2
    assert groups.lapsed([1], leased={2}) == []
    assert groups.admit([msgs[0]], leased={2}) == ([], [msgs[0]])
    # both lapsed: those behind are offered again, the front goes out again first,
    # and what follows it joins
    assert groups.lapsed([2], leased=set()) == [3, 4]
    assert 3 not in groups and 4 not in groups
    assert groups.admit(msgs, leased=set()) == (msgs, [])


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["publish", "walk", "end_front", "expire"]),
            st.integers(0, 3),
            st.integers(1, 4),
        ),
        max_size=40,
    )
)
def test_a_group_hands_out_the_oldest_messages_it_has_met(
    plan: list[tuple[str, int, int]],
) -> None:
    """Walks meet a group's messages that do not wait in ascending order, but may pass
    the first few by (as a walk does that reads on from where an earlier one stopped,
    before an older message was offered again) and take only a few; a new front
    handed out is always the oldest messages met and not gone, in order, and
    nothing goes out while a front is in flight."""
    groups = Groups()
    alive: list[int] = []  # published and not gone, ascending
    met: set[int] = set()
    front: list[int] = []  # handed out, in flight, not gone
    published = 0
    for op, skip, count in plan:
        if op == "publish":
            alive += range(published + 1, published + count + 1)
            published += count
        elif op == "walk":
            seen = [mid for mid in alive if mid not in groups and mid not in front]
            seen = seen[skip : skip + count]
            out, _ = groups.admit([Message(mid, b"", group="g") for mid in seen], set(front))
            ids = [m.id for m in out]
            if front:
                assert ids == [], "messages while the front is in flight"
            elif ids:
                known = [mid for mid in alive if mid in met or mid in seen]
                assert ids == known[: len(ids)], (ids, known)
            front += ids
            met.update(seen)
        elif op == "end_front" and front:
            gone = front.pop(skip % len(front))
            alive.remove(gone)
            groups.ended([gone])
        elif op == "expire" and alive and alive[skip % len(alive)] not in front:
            groups.ended([alive.pop(skip % len(alive))])


async def a_head_and_two_behind(
    store: LmdbBackend, clock: FakeClock
) -> tuple[QueueService, QueueService, Message]:
    """Two engines on ``store``; three messages of group ``g``, the first leased by the
    first engine (the group's head there), the others met behind it."""
    one, two = await two_engines(store, clock)
    await one.publish("q", [Outgoing(b"%d" % i, group="g") for i in range(1, 4)])
    clock.advance(0.001)  # due for the other engine too (a burst draws ahead)
    (first,) = await one.receive("q", 1)
    assert first.body == b"1"
    assert await one.receive("q", 10) == []  # the others met, behind it
    return one, two, first


async def test_a_group_served_elsewhere_meanwhile_does_not_wait_for_what_was_known(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    # Given a node whose walk met a group's head (leased here) and two behind it
    one, two, _ = await a_head_and_two_behind(store, fake_clock)
    # When its slice moves away from the group, the other serves all three
    stripe = group_stripe("g")
    elsewhere = ((stripe + 1) << SEQ_BITS, ID_MAX) if stripe == 0 else (0, (stripe << SEQ_BITS) - 1)
    one.set_keyspace(elsewhere)
    # (the head leased here still names its group: a handoff gives it to the new owner)
    assert [lease.group for lease in (await one.custody.export(0, ID_MAX))["q"]] == ["g"]
    for _ in range(3):
        got = await two.receive("q", 1)
        assert await two.delete("q", [m.id for m in got]) == [True]
    # and the slice comes back with a new message of the group, after the head's
    # lease here lapsed (a delete through another node is told to the owner only)
    (fourth,) = await two.publish("q", [Outgoing(b"4", group="g")])
    one.set_keyspace(WHOLE)
    fake_clock.advance(31.0)
    # Then it is handed out: the head is found gone, and nothing else was kept
    got = await one.receive("q", 10) or await one.receive("q", 10)
    assert [m.id for m in got] == [fourth]


def test_a_group_no_longer_owned_keeps_only_its_messages_leased_here() -> None:
    groups = Groups()
    msgs = [Message(i, b"", group="g" if i < 4 else "h") for i in range(1, 7)]
    groups.admit(msgs[:2] + msgs[3:4], leased=set())  # fronts [1, 2] and [4]
    groups.admit(msgs[2:3] + msgs[4:], leased={1, 2, 4})  # 3, 5, 6 behind them
    groups.forget(lambda group: False, leased={1})
    assert groups.front_of(msgs[1]) == [1] and groups.front_of(msgs[4]) == ()
    assert not any(i in groups for i in range(1, 7))
    assert groups.ended([1]) == [] and not groups


async def test_a_head_deleted_unseen_lets_its_group_move_on_when_its_lease_ends(
    store: LmdbBackend, fake_clock: FakeClock
) -> None:
    # Given a head leased here, with two messages waiting behind it
    one, two, first = await a_head_and_two_behind(store, fake_clock)
    # When it is deleted through another node whose word does not arrive (a view
    # that changed meanwhile), and its lease here ends
    assert await two.delete("q", [first.id]) == [True]
    fake_clock.advance(31.0)
    # Then the head is found gone, and the next messages of the group come
    assert [m.body for m in await one.receive("q", 10)] == [b"2", b"3"]
