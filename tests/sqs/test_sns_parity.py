"""SNS's refusals through boto3, in the words AWS answered (recorded from AWS itself)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.servers import require_module
from tests.sqs.test_sns import new_topic

require_module("boto3", "test")

from botocore.exceptions import ClientError  # noqa: E402


def _refusal(call: Any, **params: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as refused:
        call(**params)
    error = refused.value.response["Error"]
    return error["Code"], error["Message"]


@pytest.mark.parametrize(
    ("subject", "taken"),
    [(None, True), ("", False), ("s" * 99, True), ("s" * 100, False), ("a\nb", False)],
    ids=["absent", "empty", "99", "100", "line-break"],
)
def test_a_subject_is_taken_or_refused_as_sns_does(
    sns: Any, subject: str | None, taken: bool
) -> None:
    topic = new_topic(sns)
    given = {} if subject is None else {"Subject": subject}
    if taken:
        assert sns.publish(TopicArn=topic, Message="m", **given)["MessageId"]
    else:
        refused = _refusal(sns.publish, TopicArn=topic, Message="m", **given)
        assert refused == ("InvalidParameter", "Invalid parameter: Subject")


def test_publishes_and_subscriptions_aws_refuses(sns: Any) -> None:
    topic = new_topic(sns)
    endpoint = topic.rsplit(":", 1)[0] + ":endpoint/APNS/app/0f7d5971"
    assert _refusal(sns.publish, TargetArn=endpoint, Message="m") == (
        "InvalidParameter",
        "Invalid parameter: TargetArn Reason: No endpoint found for the target arn specified",
    )
    assert _refusal(sns.publish, TopicArn=topic, Message="") == (
        "InvalidParameter",
        "Invalid parameter: Empty message",
    )
    assert _refusal(sns.publish, TopicArn=topic + "-fake", Message="m") == (
        "NotFound",
        "Topic does not exist",
    )
    for arn, parts in (("randomstring", 1), ("arn:aws:sns:us-east-1:random", 5)):
        assert _refusal(sns.subscribe, TopicArn=arn, Protocol="sqs", Endpoint="x") == (
            "InvalidParameter",
            f"Invalid parameter: TopicArn Reason: An ARN must have at least 6 elements, "
            f"not {parts}",
        )
    assert _refusal(sns.subscribe, TopicArn=topic + "aaa", Protocol="sqs", Endpoint="x") == (
        "NotFound",
        "Topic does not exist",
    )
    assert _refusal(sns.subscribe, TopicArn=topic, Protocol="sqs", Endpoint="unknown") == (
        "InvalidParameter",
        "Invalid parameter: SQS endpoint ARN",
    )
