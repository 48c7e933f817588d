"""Fair queues through boto3: MessageGroupId on a standard queue names a tenant, as on AWS
(its answers and texts are those AWS recorded)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.servers import require_module
from tests.sqs.conftest import queue_arn

require_module("boto3", "test")

from botocore.exceptions import ClientError  # noqa: E402

NewQueue = Callable[..., str]


def test_a_standard_queue_keeps_and_returns_a_message_s_group(
    sqs: Any, new_queue: NewQueue
) -> None:
    url = new_queue()
    sent = sqs.send_message(QueueUrl=url, MessageBody="message", MessageGroupId="test")
    assert set(sent) - {"ResponseMetadata"} == {"MD5OfMessageBody", "MessageId"}
    (got,) = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, AttributeNames=["All"])[
        "Messages"
    ]
    # AWS's answer: the group among the system attributes, no sequence number
    assert set(got["Attributes"]) == {
        "ApproximateFirstReceiveTimestamp",
        "ApproximateReceiveCount",
        "MessageGroupId",
        "SenderId",
        "SentTimestamp",
    }
    assert got["Attributes"]["MessageGroupId"] == "test"


@pytest.mark.parametrize("group", ["", "a" * 129, "group 123"], ids=["empty", "long", "space"])
def test_a_standard_queue_refuses_a_malformed_group_in_aws_s_words(
    sqs: Any, new_queue: NewQueue, group: str
) -> None:
    url = new_queue()
    with pytest.raises(ClientError) as refused:
        sqs.send_message(QueueUrl=url, MessageBody="message", MessageGroupId=group)
    error = refused.value.response["Error"]
    assert (error["Code"], error["QueryErrorCode"], error["Type"]) == (
        "InvalidParameterValue",
        "InvalidParameterValueException",
        "Sender",
    )
    assert error["Message"] == (
        f"Value {group} for parameter MessageGroupId is invalid. Reason: MessageGroupId can "
        "only include alphanumeric and punctuation characters. 1 to 128 in length."
    )


def test_a_standard_queue_s_groups_are_not_ordered(sqs: Any, new_queue: NewQueue) -> None:
    # A FIFO queue would hand out one group's second message only after its first is
    # deleted; a fair queue hands out both at once.
    url = new_queue()
    for body in ("one", "two"):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="tenant")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    first = got.get("Messages", [])
    if len(first) < 2:  # a standard queue may answer with fewer than it holds
        first += sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)[
            "Messages"
        ]
    assert sorted(m["Body"] for m in first) == ["one", "two"]


def test_a_noisy_tenant_waits_while_a_quiet_one_has_messages(sqs: Any, new_queue: NewQueue) -> None:
    # Given a tenant with a backlog of 300, 100 of them in flight
    url = new_queue(VisibilityTimeout="60")
    for start in range(0, 300, 10):
        entries = [
            {"Id": str(i), "MessageBody": f"flood-{start + i}", "MessageGroupId": "noisy"}
            for i in range(10)
        ]
        assert not sqs.send_message_batch(QueueUrl=url, Entries=entries).get("Failed")
    held = 0
    while held < 100:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        held += len(got.get("Messages", []))
    # When a quiet tenant sends after the whole backlog
    quiet = {
        sqs.send_message(QueueUrl=url, MessageBody=f"quiet-{i}", MessageGroupId="quiet")[
            "MessageId"
        ]
        for i in range(3)
    }
    # Then the next receives hand out its messages before any more of the backlog
    out: list[dict[str, Any]] = []
    while len(out) < 3:
        out += sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=1, WaitTimeSeconds=1, AttributeNames=["All"]
        ).get("Messages", [])
    assert {m["MessageId"] for m in out[:3]} == quiet
    assert {m["Attributes"]["MessageGroupId"] for m in out[:3]} == {"quiet"}


def test_a_standard_topic_forwards_a_message_s_group_to_its_queues(
    sqs: Any, sns: Any, new_queue: NewQueue
) -> None:
    # Given a standard topic with a raw and an enveloped standard queue subscribed
    topic = sns.create_topic(Name=f"t-{new_queue().rsplit('/', 1)[1]}")["TopicArn"]
    raw, enveloped = new_queue(), new_queue()
    for url, attributes in ((raw, {"RawMessageDelivery": "true"}), (enveloped, {})):
        sns.subscribe(
            TopicArn=topic,
            Protocol="sqs",
            Endpoint=queue_arn(sqs, url),
            Attributes=attributes,
        )
    # When a message is published with a group, alone and in a batch
    sns.publish(TopicArn=topic, Message="alone", MessageGroupId="tenant-a")
    sns.publish_batch(
        TopicArn=topic,
        PublishBatchRequestEntries=[{"Id": "1", "Message": "batched", "MessageGroupId": "b"}],
    )
    # Then each queue's copies carry it as their MessageGroupId
    for url in (raw, enveloped):
        got: list[dict[str, Any]] = []
        while len(got) < 2:
            got += sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2, AttributeNames=["All"]
            ).get("Messages", [])
        bodies = {
            (m["Body"] if url == raw else json.loads(m["Body"])["Message"]): m["Attributes"].get(
                "MessageGroupId"
            )
            for m in got
        }
        assert bodies == {"alone": "tenant-a", "batched": "b"}
    # And a malformed group is refused, as on a queue
    with pytest.raises(ClientError) as refused:
        sns.publish(TopicArn=topic, Message="x", MessageGroupId="has space")
    assert refused.value.response["Error"]["Code"] == "InvalidParameter"
