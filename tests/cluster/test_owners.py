"""Which of a publish's ids the members serving them must hear of before the answer."""

from __future__ import annotations

from dynamiq.models import Outgoing
from dynamiq.service.owners import pinned_ids


def test_only_grouped_or_deduplicated_messages_are_pinned() -> None:
    messages: list[bytes | Outgoing] = [
        Outgoing(b"a", group="g"),
        b"b",
        Outgoing(b"c", dedup_id="d"),
        Outgoing(b"e"),
    ]
    assert pinned_ids(messages, [1, 2, None, 4]) == {1}
    assert pinned_ids(messages, [1, 2, 3, 4]) == {1, 3}


def test_copies_told_without_their_messages_are_not_pinned() -> None:
    # A wide fan-out's copies are told as they land: a queue's ids, no messages.
    assert pinned_ids([], [7, 8, 9]) == set()
