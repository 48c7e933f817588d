"""The lease table, on a fake clock."""

from __future__ import annotations

from dynamiq.core.clock import FakeClock
from dynamiq.core.delivery.leases import LeaseTable


def test_a_leased_id_cannot_be_leased_again_until_its_deadline(fake_clock: FakeClock) -> None:
    leases = LeaseTable()
    assert leases.acquire([1, 2], fake_clock.now(), 30) == [1, 2]
    fake_clock.advance(29.9)
    assert leases.acquire([1, 2, 3], fake_clock.now(), 30) == [3]
    assert leases.expire(fake_clock.now()) == []
    fake_clock.advance(0.1)
    assert sorted(leases.expire(fake_clock.now())) == [1, 2]
    assert leases.acquire([1], fake_clock.now(), 30) == [1]


def test_release_ends_a_lease_and_its_stale_deadline_is_ignored(fake_clock: FakeClock) -> None:
    leases = LeaseTable()
    leases.acquire([1], fake_clock.now(), 10)
    leases.release([1])
    assert 1 not in leases and len(leases) == 0
    # Re-leased later with a longer timeout: the first deadline must not end it.
    fake_clock.advance(5)
    leases.acquire([1], fake_clock.now(), 60)
    fake_clock.advance(6)
    assert leases.expire(fake_clock.now()) == []
    assert 1 in leases


def test_stale_entries_are_compacted_so_memory_follows_in_flight(fake_clock: FakeClock) -> None:
    leases = LeaseTable()
    for i in range(20_000):
        leases.acquire([i], fake_clock.now(), 30)
        leases.release([i])
    assert len(leases) == 0
    assert len(leases._heap) <= 1024 + 1


def test_next_deadline_and_release_all(fake_clock: FakeClock) -> None:
    leases = LeaseTable()
    assert leases.next_deadline() is None
    leases.acquire([5], fake_clock.now(), 3)
    assert leases.next_deadline() == fake_clock.now() + 3
    assert leases.release_all() == [5]
    assert len(leases) == 0 and leases.next_deadline() is None


def test_extend_moves_only_live_leases(fake_clock: FakeClock) -> None:
    leases = LeaseTable()
    leases.acquire([1, 2], fake_clock.now(), 10)
    fake_clock.advance(5)
    assert leases.extend([1, 3], fake_clock.now(), 20) == [1]  # 3 was never leased
    fake_clock.advance(6)
    assert leases.expire(fake_clock.now()) == [2]
    fake_clock.advance(14)
    assert leases.extend([1], fake_clock.now(), 5) == []  # its deadline has come
    assert leases.expire(fake_clock.now()) == [1]


def test_hold_keeps_a_lease_until_the_later_of_two_ends(fake_clock: FakeClock) -> None:
    leases = LeaseTable()
    # Given this node's own leases on 1 (ending in 5 s) and 2 (in 30 s)
    leases.acquire([1, 2], fake_clock.now(), 5)
    leases.extend([2], fake_clock.now(), 30)
    # When it takes over another node's leases on 1, 2 and 3, ending in 10 s
    leases.hold([1, 2, 3], fake_clock.now(), 10)
    # Then 1 and 3 end only then, and 2 at its own, later end
    fake_clock.advance(5)
    assert leases.expire(fake_clock.now()) == []
    fake_clock.advance(5)
    assert sorted(leases.expire(fake_clock.now())) == [1, 3]
    fake_clock.advance(20)
    assert leases.expire(fake_clock.now()) == [2]


def test_a_lease_in_hand_does_not_end_until_handed_out(fake_clock: FakeClock) -> None:
    leases = LeaseTable()
    assert leases.take([1, 2, 3], fake_clock.now(), 1) == [1, 2, 3]
    fake_clock.advance(2)
    assert leases.expire(fake_clock.now()) == []
    assert leases.acquire([1, 2, 3], fake_clock.now(), 1) == []  # in hand: not free
    leases.release([3])
    leases.hand_out([1], fake_clock.now())  # as taken: its deadline has come
    leases.hand_out([2], fake_clock.now(), restart=5)  # a whole lease from now
    assert leases.expire(fake_clock.now()) == [1]
    fake_clock.advance(5)
    assert leases.expire(fake_clock.now()) == [2]
    assert len(leases) == 0


def test_a_lease_handed_out_in_time_ends_at_its_deadline(fake_clock: FakeClock) -> None:
    leases = LeaseTable()
    leases.take([1], fake_clock.now(), 10)
    leases.hand_out([1], fake_clock.now())
    fake_clock.advance(9.9)
    assert leases.expire(fake_clock.now()) == []
    fake_clock.advance(0.1)
    assert leases.expire(fake_clock.now()) == [1]
