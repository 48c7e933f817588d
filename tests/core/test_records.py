"""Stored records: the header, compression, and the cache of recent records."""

from __future__ import annotations

import pytest

from dynamiq.core.records import NO_META, Meta, RecentRecords, encode, message, meta_of, with_meta
from dynamiq.errors import ServerError
from dynamiq.models import DeadLetter, Message


@pytest.mark.parametrize("compress", [False, True])
def test_a_record_round_trips(compress: bool) -> None:
    body = b"\x00\xff" + b"payload " * 50
    record = encode(body, 1_795_000_000_123, compress)
    assert message(7, record) == Message(7, body, 1_795_000_000_123)
    assert meta_of(record) == (1_795_000_000_123, NO_META)
    assert (len(record) < len(body)) is compress


@pytest.mark.parametrize("compress", [False, True])
def test_metadata_is_replaced_without_touching_the_body(compress: bool) -> None:
    body = b"payload " * 50
    plain = encode(body, 1_795_000_000_123, compress)
    note = DeadLetter("orders", "max_receives", 3, 1_795_000_001_000)
    meta = Meta(receive_count=4, first_received_ms=1_795_000_000_200, dead_letter=note)
    counted = with_meta(plain, meta)
    assert meta_of(counted) == (1_795_000_000_123, meta)
    assert message(9, counted) == Message(9, body, 1_795_000_000_123, 4, 1_795_000_000_200, note)
    assert with_meta(counted, NO_META) == plain  # a message with nothing to say stays small
    assert encode(body, 1_795_000_000_123, compress, meta) == counted


def test_an_unknown_record_format_is_a_server_error() -> None:
    with pytest.raises(ServerError):
        message(1, b"\x07garbage")


def test_recent_records_leave_on_take_age_and_budget() -> None:
    recent = RecentRecords(max_bytes=25, max_age=1.0)
    recent.add("q", [1, 2], [b"x" * 10, b"y" * 10], now=0.0)
    assert recent.take("q", [1, 3], now=0.5) == {1: b"x" * 10}
    assert recent.take("q", [1], now=0.5) == {}  # taken once only
    recent.add("q", [3], [b"z" * 10], now=0.6)
    assert recent.take("q", [2], now=0.7) == {}  # over budget: the oldest batch went
    assert recent.take("q", [3], now=1.7) == {}  # too old
    recent.add("q", [5, 6], [b"v", b"u"], now=2.0)
    recent.discard("q", [5])
    assert recent.take("q", [5, 6], now=2.0) == {6: b"u"}
    assert recent.take("other", [6], now=2.0) == {}
