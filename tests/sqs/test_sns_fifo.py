"""SNS FIFO topics' high throughput mode through boto3: ``FifoThroughputScope`` decides
where a duplicate is found (the whole topic, or one message group), and only narrows."""

from __future__ import annotations

from typing import Any

import pytest

from tests.servers import require_module
from tests.sqs.test_sns import code_of, drain, fifo_into_queue, new_topic

require_module("boto3", "test")

from botocore.exceptions import ClientError  # noqa: E402


def _publish_twice(sns: Any, topic: str) -> None:
    """One deduplication id in two groups."""
    for group in ("a", "b"):
        sns.publish(
            TopicArn=topic, Message=group, MessageGroupId=group, MessageDeduplicationId="same"
        )


def test_a_topic_scope_finds_a_duplicate_in_any_group(sns: Any, sqs: Any, new_queue: Any) -> None:
    topic, url = fifo_into_queue(sns, sqs, new_queue)
    _publish_twice(sns, topic)
    assert [m["Body"] for m in drain(sqs, url, 1)] == ["a"]
    # The scope is shown only once set, as AWS shows it
    assert "FifoThroughputScope" not in sns.get_topic_attributes(TopicArn=topic)["Attributes"]


def test_a_message_group_scope_finds_duplicates_within_a_group_only(
    sns: Any, sqs: Any, new_queue: Any
) -> None:
    # Given a topic in the high throughput mode, into a queue that dedups queue-wide
    topic, url = fifo_into_queue(sns, sqs, new_queue, FifoThroughputScope="MessageGroup")
    # When one deduplication id comes in two groups, and again in the first
    _publish_twice(sns, topic)
    sns.publish(
        TopicArn=topic, Message="a again", MessageGroupId="a", MessageDeduplicationId="same"
    )
    # Then each group's first is delivered, the repeat is not
    assert sorted(m["Body"] for m in drain(sqs, url, 2)) == ["a", "b"]
    shown = sns.get_topic_attributes(TopicArn=topic)["Attributes"]
    assert shown["FifoThroughputScope"] == "MessageGroup"


def test_the_scope_narrows_from_the_next_message_and_never_widens(
    sns: Any, sqs: Any, new_queue: Any
) -> None:
    topic, url = fifo_into_queue(sns, sqs, new_queue)
    sns.set_topic_attributes(
        TopicArn=topic, AttributeName="FifoThroughputScope", AttributeValue="Topic"
    )
    sns.set_topic_attributes(
        TopicArn=topic, AttributeName="FifoThroughputScope", AttributeValue="MessageGroup"
    )
    _publish_twice(sns, topic)
    assert sorted(m["Body"] for m in drain(sqs, url, 2)) == ["a", "b"]
    with pytest.raises(ClientError) as refused:
        sns.set_topic_attributes(
            TopicArn=topic, AttributeName="FifoThroughputScope", AttributeValue="Topic"
        )
    assert code_of(refused) == "InvalidParameter"
    shown = sns.get_topic_attributes(TopicArn=topic)["Attributes"]
    assert shown["FifoThroughputScope"] == "MessageGroup"


@pytest.mark.parametrize(
    ("name", "attributes"),
    [
        ("-std", {"FifoThroughputScope": "Topic"}),  # a standard topic has no such scope
        (".fifo", {"FifoTopic": "true", "FifoThroughputScope": "Queue"}),
    ],
    ids=["standard", "unknown"],
)
def test_a_scope_a_topic_cannot_have_is_refused(
    sns: Any, name: str, attributes: dict[str, str]
) -> None:
    with pytest.raises(ClientError) as refused:
        new_topic(sns, name, **attributes)
    assert code_of(refused) == "InvalidParameter"
