"""Errors rebuilt from a response carry what the server said, Retry-After included."""

from __future__ import annotations

import pytest

from dynamiq.errors import DynamiqError, RetryLater, error_for_code


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("TOO_MANY_REQUESTS", 429),
        ("BACKEND_UNAVAILABLE", 503),
        ("OVERLOADED", 503),
        ("DISK_LOW", 503),
        ("NO_MAJORITY", 503),
    ],
)
def test_every_error_that_says_when_to_retry_says_it_when_rebuilt(code: str, status: int) -> None:
    error = error_for_code(code, "later", status)
    assert isinstance(error, RetryLater) and error.code == code and error.status == status
    assert error.retry_after == 1  # the server's header, when there is one, replaces it


def test_errors_that_do_not_say_when_to_retry_are_not_retry_later() -> None:
    for code, status in (("FORBIDDEN", 403), ("REQUEST_TIMEOUT", 408), ("SOMETHING", 500)):
        error = error_for_code(code, "no", status)
        assert isinstance(error, DynamiqError) and not isinstance(error, RetryLater)
