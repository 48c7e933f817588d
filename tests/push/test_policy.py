"""SNS's HTTP/S delivery policies: AWS's defaults and limits, the effective policy a topic
shows, and the delays each backoff function gives between retries."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dynamiq.errors import Invalid
from dynamiq.push.policy import (
    BACKOFF_FUNCTIONS,
    MAX_RETRY_SECONDS,
    RetryPolicy,
    effective_topic_policy,
    topic_policy,
)


def test_the_default_is_three_retries_twenty_seconds_apart() -> None:
    assert RetryPolicy().delays() == [20.0, 20.0, 20.0]
    shown = effective_topic_policy({})["http"]
    assert shown == {
        "defaultHealthyRetryPolicy": {
            "minDelayTarget": 20,
            "maxDelayTarget": 20,
            "numRetries": 3,
            "numMaxDelayRetries": 0,
            "numNoDelayRetries": 0,
            "numMinDelayRetries": 0,
            "backoffFunction": "linear",
        },
        "disableSubscriptionOverrides": False,
        "defaultRequestPolicy": {"headerContentType": "text/plain; charset=UTF-8"},
    }


def test_the_phases_come_in_order_and_the_backoff_grows_to_the_maximum() -> None:
    policy = RetryPolicy.read(
        {
            "minDelayTarget": 2,
            "maxDelayTarget": 60,
            "numRetries": 10,
            "numNoDelayRetries": 2,
            "numMinDelayRetries": 1,
            "numMaxDelayRetries": 2,
        },
        "p",
    )
    delays = policy.delays()
    assert len(delays) == 10
    assert delays[:3] == [0.0, 0.0, 2.0] and delays[-2:] == [60.0, 60.0]
    backoff = delays[3:8]
    assert backoff == sorted(backoff) and backoff[-1] == 60.0 and backoff[0] > 2.0


@pytest.mark.parametrize("function", BACKOFF_FUNCTIONS)
def test_every_backoff_function_rises_from_the_minimum_to_the_maximum(function: str) -> None:
    given = {"minDelayTarget": 1, "maxDelayTarget": 100, "numRetries": 8}
    delays = RetryPolicy.read({**given, "backoffFunction": function}, "p").delays()
    assert delays == sorted(delays) and 1.0 <= delays[0] < delays[-1] == 100.0


def test_the_functions_differ_as_their_names_say() -> None:
    given = {"minDelayTarget": 1, "maxDelayTarget": 100, "numRetries": 4}
    middle = {
        f: RetryPolicy.read({**given, "backoffFunction": f}, "p").delays()[1]
        for f in BACKOFF_FUNCTIONS
    }
    # halfway through the backoff: even growth is furthest along, doubling least
    assert middle["linear"] > middle["arithmetic"] > middle["geometric"] > middle["exponential"]


@pytest.mark.parametrize(
    ("policy", "said"),
    [
        ({"numRetries": 101}, "numRetries is at most 100"),
        ({"numRetries": -1}, "must be a whole number"),
        ({"numRetries": 2.5}, "must be a whole number"),
        ({"minDelayTarget": 0}, "1 <= minDelayTarget"),
        ({"minDelayTarget": 30, "maxDelayTarget": 20}, "1 <= minDelayTarget"),
        ({"maxDelayTarget": 3601, "minDelayTarget": 20}, f"<= {MAX_RETRY_SECONDS} seconds"),
        ({"numRetries": 2, "numNoDelayRetries": 2, "numMaxDelayRetries": 1}, "add up to more"),
        ({"numRetries": 100, "minDelayTarget": 60, "maxDelayTarget": 60}, "more than 3600"),
        ({"backoffFunction": "cubic"}, "backoffFunction is one of"),
        ({"numRetriess": 3}, "not a retry policy field"),
    ],
)
def test_a_retry_policy_past_aws_limits_is_refused(policy: dict[str, Any], said: str) -> None:
    text = json.dumps({"http": {"defaultHealthyRetryPolicy": policy}})
    with pytest.raises(Invalid, match=said):
        topic_policy(text)


@pytest.mark.parametrize(
    ("http", "said"),
    [
        ({"defaultThrottlePolicy": {"maxReceivesPerSecond": 0}}, "1 or more"),
        ({"defaultThrottlePolicy": {"other": 1}}, "holds only maxReceivesPerSecond"),
        ({"defaultRequestPolicy": {"headerContentType": "no type"}}, "headerContentType"),
        ({"disableSubscriptionOverrides": "no"}, "true or false"),
        ({"somethingElse": 1}, "not a delivery policy field"),
    ],
)
def test_the_other_parts_are_checked_too(http: dict[str, Any], said: str) -> None:
    with pytest.raises(Invalid, match=said):
        topic_policy(json.dumps({"http": http}))
    for text in ("[1]", "not json", '{"http": 5}'):
        with pytest.raises(Invalid):
            topic_policy(text)


def test_the_effective_policy_keeps_what_the_topic_says() -> None:
    given = topic_policy(
        json.dumps(
            {
                "http": {
                    "defaultHealthyRetryPolicy": {"numRetries": 5, "backoffFunction": "geometric"},
                    "defaultThrottlePolicy": {"maxReceivesPerSecond": 10},
                    "defaultRequestPolicy": {"headerContentType": "application/json"},
                    "disableSubscriptionOverrides": True,
                }
            }
        )
    )
    shown = effective_topic_policy(given)["http"]
    assert shown["defaultHealthyRetryPolicy"]["numRetries"] == 5
    assert shown["defaultHealthyRetryPolicy"]["minDelayTarget"] == 20
    assert shown["defaultHealthyRetryPolicy"]["backoffFunction"] == "geometric"
    assert shown["defaultThrottlePolicy"] == {"maxReceivesPerSecond": 10}
    assert shown["defaultRequestPolicy"] == {"headerContentType": "application/json"}
    assert shown["disableSubscriptionOverrides"] is True
