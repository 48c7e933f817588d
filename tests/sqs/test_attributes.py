"""Queue attributes kept and read back through boto3, deduplication scopes, and
permissions edited as AWS edits them (its texts are those AWS sent)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.servers import require_module

require_module("boto3", "test")

from botocore.exceptions import ClientError  # noqa: E402

NewQueue = Callable[..., str]


def _refusal(exc: pytest.ExceptionInfo[ClientError]) -> tuple[str, str]:
    error = exc.value.response["Error"]
    return error["Code"], error["Message"]


def _attributes(sqs: Any, url: str, *names: str) -> dict[str, str]:
    answer = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(names) or ["All"])
    return dict(answer.get("Attributes", {}))


def _bodies(sqs: Any, url: str) -> list[str]:
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    return sorted(m["Body"] for m in got.get("Messages", []))


def test_a_dedup_id_holds_across_groups_by_default(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue(".fifo", FifoQueue="true")
    shown = _attributes(sqs, url, "DeduplicationScope", "FifoThroughputLimit")
    assert shown == {"DeduplicationScope": "queue", "FifoThroughputLimit": "perQueue"}
    first = sqs.send_message(
        QueueUrl=url, MessageBody="a", MessageGroupId="g1", MessageDeduplicationId="d"
    )
    again = sqs.send_message(
        QueueUrl=url, MessageBody="b", MessageGroupId="g2", MessageDeduplicationId="d"
    )
    assert again["MessageId"] == first["MessageId"]
    assert _bodies(sqs, url) == ["a"]


def test_a_message_group_scope_deduplicates_within_a_group(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue(
        ".fifo",
        FifoQueue="true",
        ContentBasedDeduplication="true",
        DeduplicationScope="messageGroup",
        FifoThroughputLimit="perMessageGroupId",
    )
    shown = _attributes(sqs, url, "DeduplicationScope", "FifoThroughputLimit")
    assert shown == {
        "DeduplicationScope": "messageGroup",
        "FifoThroughputLimit": "perMessageGroupId",
    }
    for group in ("g1", "g2", "g1"):
        sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId=group)
    assert _bodies(sqs, url) == ["same", "same"]  # once per group


def test_the_throughput_limit_and_scope_are_checked_as_a_pair(
    sqs: Any, new_queue: NewQueue
) -> None:
    url = new_queue(".fifo", FifoQueue="true")
    with pytest.raises(ClientError) as refused:
        sqs.set_queue_attributes(
            QueueUrl=url, Attributes={"FifoThroughputLimit": "perMessageGroupId"}
        )
    code, message = _refusal(refused)
    assert code == "InvalidAttributeValue" and "DeduplicationScope" in message
    assert _attributes(sqs, url, "FifoThroughputLimit") == {"FifoThroughputLimit": "perQueue"}
    sqs.set_queue_attributes(
        QueueUrl=url,
        Attributes={
            "DeduplicationScope": "messageGroup",
            "FifoThroughputLimit": "perMessageGroupId",
        },
    )
    standard = new_queue()
    for name, value in (("DeduplicationScope", "queue"), ("FifoThroughputLimit", "perQueue")):
        with pytest.raises(ClientError) as refused:
            sqs.set_queue_attributes(QueueUrl=standard, Attributes={name: value})
        assert _refusal(refused) == (
            "InvalidAttributeName",
            f"You can specify the {name} only when FifoQueue is set to true.",
        )


def test_a_queue_s_type_cannot_change(sqs: Any, new_queue: NewQueue) -> None:
    standard, fifo = new_queue(), new_queue(".fifo", FifoQueue="true")
    modifying = (
        "InvalidAttributeValue",
        "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not supported.",
    )
    for url, value, refusal in (
        (standard, "true", ("InvalidAttributeName", "Unknown Attribute FifoQueue.")),
        (standard, "false", modifying),
        (fifo, "false", modifying),
    ):
        with pytest.raises(ClientError) as refused:
            sqs.set_queue_attributes(QueueUrl=url, Attributes={"FifoQueue": value})
        assert _refusal(refused) == refusal
    sqs.set_queue_attributes(QueueUrl=fifo, Attributes={"FifoQueue": "true"})  # as it is


def test_policies_and_keys_are_kept_and_read_back(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue()
    arn = _attributes(sqs, url, "QueueArn")["QueueArn"]
    policy = json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": "sns.amazonaws.com"},
                    "Action": "sqs:SendMessage",
                    "Resource": arn,
                }
            ],
        }
    )
    kept = {
        "Policy": policy,
        "RedriveAllowPolicy": json.dumps(
            {"redrivePermission": "byQueue", "sourceQueueArns": [arn]}
        ),
        "KmsMasterKeyId": "alias/aws/sqs",
        "KmsDataKeyReusePeriodSeconds": "600",
        "SqsManagedSseEnabled": "true",
    }
    sqs.set_queue_attributes(QueueUrl=url, Attributes=kept)
    assert _attributes(sqs, url, *kept) == kept
    assert {k: _attributes(sqs, url)[k] for k in kept} == kept  # "All" shows them too
    # An empty text removes one; the others stay.
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": ""})
    assert "Policy" not in _attributes(sqs, url)
    assert _attributes(sqs, url, "KmsMasterKeyId") == {"KmsMasterKeyId": "alias/aws/sqs"}
    # Kept at creation as well.
    created = new_queue(Policy=policy, SqsManagedSseEnabled="false")
    assert _attributes(sqs, created, "Policy", "SqsManagedSseEnabled") == {
        "Policy": policy,
        "SqsManagedSseEnabled": "false",
    }


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Policy", "not json"),
        ("Policy", json.dumps({"Statement": []})),
        ("Policy", json.dumps({"Statement": [{"Effect": "Maybe", "Action": "sqs:*"}]})),
        ("RedriveAllowPolicy", json.dumps({"redrivePermission": "byQueue"})),
        ("RedriveAllowPolicy", json.dumps({"redrivePermission": "some"})),
        ("KmsDataKeyReusePeriodSeconds", "5"),
        ("SqsManagedSseEnabled", "perhaps"),
    ],
)
def test_a_malformed_kept_attribute_is_refused_and_changes_nothing(
    sqs: Any, new_queue: NewQueue, name: str, value: str
) -> None:
    url = new_queue()
    with pytest.raises(ClientError) as refused:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={name: value})
    code, message = _refusal(refused)
    assert code == "InvalidAttributeValue"
    assert message.startswith(f"Invalid value for the parameter {name}. Reason: ")
    assert name not in _attributes(sqs, url) or name == "SqsManagedSseEnabled"
    assert _attributes(sqs, url, "SqsManagedSseEnabled") == {"SqsManagedSseEnabled": "false"}


def test_permissions_edit_the_policy_as_aws_does(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue()
    arn = _attributes(sqs, url, "QueueArn")["QueueArn"]
    account = arn.split(":")[4]
    sqs.add_permission(
        QueueUrl=url,
        AWSAccountIds=["668614515564", account],
        Actions=["ReceiveMessage"],
        Label="cross",
    )
    policy = json.loads(_attributes(sqs, url, "Policy")["Policy"])
    assert policy == {
        "Version": "2008-10-17",
        "Id": f"{arn}/SQSDefaultPolicy",
        "Statement": [
            {
                "Sid": "cross",
                "Effect": "Allow",
                "Principal": {
                    "AWS": [
                        "arn:aws:iam::668614515564:root",
                        f"arn:aws:iam::{account}:root",
                    ]
                },
                "Action": "SQS:ReceiveMessage",
                "Resource": arn,
            }
        ],
    }
    with pytest.raises(ClientError) as refused:
        sqs.add_permission(
            QueueUrl=url, AWSAccountIds=[account], Actions=["SendMessage"], Label="cross"
        )
    assert _refusal(refused) == (
        "InvalidParameterValue",
        "Value cross for parameter Label is invalid. Reason: Already exists.",
    )
    sqs.add_permission(
        QueueUrl=url, AWSAccountIds=[account], Actions=["SendMessage", "GetQueueUrl"], Label="two"
    )
    statements = json.loads(_attributes(sqs, url, "Policy")["Policy"])["Statement"]
    assert [s["Sid"] for s in statements] == ["cross", "two"]
    assert statements[1]["Action"] == ["SQS:SendMessage", "SQS:GetQueueUrl"]
    assert statements[1]["Principal"] == {"AWS": f"arn:aws:iam::{account}:root"}
    sqs.remove_permission(QueueUrl=url, Label="cross")
    with pytest.raises(ClientError) as refused:
        sqs.remove_permission(QueueUrl=url, Label="cross")
    assert _refusal(refused) == (
        "InvalidParameterValue",
        "Value cross for parameter Label is invalid. Reason: can't find label.",
    )
    sqs.remove_permission(QueueUrl=url, Label="two")
    assert _attributes(sqs, url, "Policy") == {}  # the last statement gone: no policy
