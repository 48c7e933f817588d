"""Stored records: the header, compression, and the cache of recent records."""

from __future__ import annotations

import pytest

from dynamiq.core.records import RecentRecords, decode, encode
from dynamiq.errors import ServerError


@pytest.mark.parametrize("compress", [False, True])
def test_a_record_round_trips(compress: bool) -> None:
    body = b"\x00\xff" + b"payload " * 50
    record = encode(body, 1_795_000_000_123, compress)
    assert decode(record) == (body, 1_795_000_000_123)
    assert (len(record) < len(body)) is compress


def test_an_unknown_record_format_is_a_server_error() -> None:
    with pytest.raises(ServerError):
        decode(b"\x07garbage")


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
