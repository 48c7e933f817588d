"""Internal requests are signed per request: made by a member, just now, once, as sent."""

from __future__ import annotations

import pytest

from dynamiq.cluster.wire import SIGNATURE_SECONDS, PeerSigner
from dynamiq.core.clock import FakeClock

SECRET = "a cluster secret of at least 32 bytes"
PATH, BODY = "/internal/v1/queues/q/receive", b"\x82\xa1a\x01"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_800_000_000.0)


def test_a_request_signed_by_a_member_is_taken_once(clock: FakeClock) -> None:
    sender, receiver = PeerSigner(SECRET, clock.now), PeerSigner(SECRET, clock.now)
    header = sender.sign(PATH, BODY)
    assert receiver.verify(header, PATH, BODY) is None
    assert receiver.verify(header, PATH, BODY) == "the request was sent before"
    # Each request carries its own nonce.
    assert receiver.verify(sender.sign(PATH, BODY), PATH, BODY) is None


def test_a_replay_is_refused_for_as_long_as_its_time_is_accepted(clock: FakeClock) -> None:
    sender, receiver = PeerSigner(SECRET, clock.now), PeerSigner(SECRET, clock.now)
    header = sender.sign(PATH, BODY)
    assert receiver.verify(header, PATH, BODY) is None
    for _ in range(3):  # the remembered nonces turn over once per window...
        clock.advance(SIGNATURE_SECONDS / 2)
        receiver.verify(sender.sign(PATH, BODY), PATH, BODY)
        refused = receiver.verify(header, PATH, BODY)
        assert refused is not None  # ...and the old request stays refused
    assert "too old" in str(refused)


@pytest.mark.parametrize(
    ("path", "body"),
    [(PATH, BODY + b"\x00"), ("/internal/v1/queues/other/receive", BODY), (PATH, b"")],
)
def test_a_request_changed_on_the_way_is_refused(clock: FakeClock, path: str, body: bytes) -> None:
    header = PeerSigner(SECRET, clock.now).sign(PATH, BODY)
    assert PeerSigner(SECRET, clock.now).verify(header, path, body) is not None


def test_another_clusters_secret_or_a_clock_far_off_is_refused(clock: FakeClock) -> None:
    receiver = PeerSigner(SECRET, clock.now)
    stranger = PeerSigner("another cluster's secret, also long enough", clock.now)
    assert receiver.verify(stranger.sign(PATH, BODY), PATH, BODY) is not None
    ahead = PeerSigner(SECRET, lambda: clock.now() + SIGNATURE_SECONDS + 1)
    assert "clock" in str(receiver.verify(ahead.sign(PATH, BODY), PATH, BODY))


@pytest.mark.parametrize(
    "header", ["", "1", "1 2", "nan n 0", "1.0 n " + "0" * 64, "é è ê", "1 2 3 4 5"]
)
def test_a_header_not_made_by_a_member_is_refused_quietly(clock: FakeClock, header: str) -> None:
    assert PeerSigner(SECRET, clock.now).verify(header, PATH, BODY) is not None
