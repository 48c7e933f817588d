"""The SWIM adapter against the library's traps, in one process over real UDP sockets."""

from __future__ import annotations

import asyncio
import gc
import socket
from collections.abc import AsyncIterator

import pytest
from swimprotocol.status import Status
from swimprotocol.udp.config import UdpConfig

from dynamiq.cluster.base import Member
from dynamiq.cluster.swim import SwimMembership, _Members, claim_port
from dynamiq.errors import ConfigError, DynamiqError
from tests.waiting import eventually

HOST = "127.0.0.1"


def fatal(error: DynamiqError) -> None:
    raise AssertionError(f"unexpected fatal: {error}")


@pytest.fixture
async def lone() -> AsyncIterator[SwimMembership]:
    node = SwimMembership("solo", "http://127.0.0.1:1", f"{HOST}:0", [], "secret")
    await node.start(fatal)
    yield node
    await node.stop()


def test_find_honours_exclude() -> None:
    members = _Members(
        UdpConfig(local_name=f"{HOST}:1", peers=[f"{HOST}:2", f"{HOST}:3"], secret="s")
    )
    target = members.get(f"{HOST}:2")
    for _ in range(200):
        assert target not in members.find(1, status=Status.ALL, exclude={target})
    assert members.find(5) == {target, members.get(f"{HOST}:3")}


def _process(port: int, boot: str, peers: list[int]) -> _Members:
    """The membership tables of one process at ``HOST:port`` (no sockets)."""
    return _Members(
        UdpConfig(
            local_name=f"{HOST}:{port}",
            peers=[f"{HOST}:{p}" for p in peers],
            secret="s",
            local_metadata={"name": f"m{port}".encode(), "boot": boot.encode()},
        )
    )


def _tell(to: _Members, about: _Members, via: _Members) -> None:
    """Apply at ``to`` what ``via`` gossips about ``about``'s member, as the worker does."""
    subject = via.get(about.local.name)
    to.apply(
        to.get(subject.name),
        to.get(via.local.name),
        subject.clock,
        status=subject.status,
        metadata=subject.metadata,
    )


def test_a_member_restarted_under_its_name_outranks_word_of_its_past_life() -> None:
    # Three processes: the member (m1), a third party (m2), and the one that
    # must see the member's new life (m3). Real tables, packets applied in turn.
    old = _process(1, "first", [2, 3])
    third, seer = _process(2, "x", [1, 3]), _process(3, "y", [1, 2])
    _tell(third, old, old)
    _tell(seer, old, old)
    # The member stops; the third party declares it offline with its own clock.
    third.update(third.get(old.local.name), new_status=Status.SUSPECT)
    third.update(third.get(old.local.name), new_status=Status.OFFLINE)
    new = _process(1, "second", [2, 3])  # the same name, started again
    _tell(seer, new, new)  # the member's own word reaches the seer first
    _tell(seer, new, third)  # then the third party's word about its past life
    member = seer.get(new.local.name)
    assert member.metadata["boot"] == b"second"
    assert member.status == Status.ONLINE


async def test_a_node_alone_keeps_its_failure_detector(lone: SwimMembership) -> None:
    await asyncio.sleep(0.6)  # several ping intervals with nobody to ping
    assert lone.detecting
    assert lone.members() == [lone.local()]
    assert lone.slice_of("solo") == (0, (1 << 63) - 1)


async def test_a_taken_gossip_port_is_refused(lone: SwimMembership) -> None:
    host, _, port = lone.address.rpartition(":")
    twin = SwimMembership("other", "http://127.0.0.1:2", f"{host}:{port}", [], "secret")
    with pytest.raises(ConfigError, match="is taken"):
        await twin.start(fatal)


async def test_two_members_see_each_other_and_a_departure(lone: SwimMembership) -> None:
    changes: list[list[str]] = []
    lone.listen(lambda members, _: changes.append([m.name for m in members]))
    other = SwimMembership("beta", "http://127.0.0.1:2", f"{HOST}:0", [lone.address], "secret")
    await other.start(fatal)
    try:
        assert [m.name for m in other.members()] == ["beta", "solo"]

        async def heard() -> bool:
            return bool(changes) and changes[-1] == ["beta", "solo"]

        await eventually(heard, what="the listener told of beta")
        beta = next(m for m in lone.members() if m.name == "beta")
        assert beta == Member("beta", HOST, "http://127.0.0.1:2", beta.boot)
        lone.depart("beta", beta.boot)
        assert changes[-1] == ["solo"]
        assert {s.member.name: s.state for s in lone.states()} == {"solo": "online", "beta": "left"}
    finally:
        await other.stop()


async def test_a_wrong_secret_never_joins(lone: SwimMembership) -> None:
    stranger = SwimMembership(
        "mallory", "http://127.0.0.1:3", f"{HOST}:0", [lone.address], "not the secret"
    )
    await stranger.start(fatal)  # waits out the join window, hearing nothing
    try:
        assert [m.name for m in lone.members()] == ["solo"]
        assert [m.name for m in stranger.members()] == ["mallory"]
    finally:
        await stranger.stop()


def test_a_claimed_port_is_free_for_udp_and_tcp() -> None:
    port = claim_port(HOST, 0)
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        with socket.socket(socket.AF_INET, kind) as sock:
            sock.bind((HOST, port))


def test_a_port_left_in_time_wait_can_be_claimed_again() -> None:
    # Given a TCP connection closed by the side bound to the port (TIME_WAIT there)
    port = claim_port(HOST, 0)
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((HOST, port))
        listener.listen()
        with socket.create_connection((HOST, port)):
            accepted, _ = listener.accept()
            accepted.close()  # the bound side closes first: its end waits in TIME_WAIT
    # Then a restarted node can claim the same port
    assert claim_port(HOST, port) == port


async def test_packets_too_short_to_have_a_header_are_dropped_quietly(
    lone: SwimMembership,
) -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    try:
        host, _, port = lone.address.rpartition(":")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for packet in (b"", b"x", b"\x00" * 5, b"\xff" * 40):
                sock.sendto(packet, (host, int(port)))
        await asyncio.sleep(0.3)
        gc.collect()  # an unretrieved task exception is reported when the task is freed
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert errors == []
    assert lone.detecting and lone.members() == [lone.local()]
