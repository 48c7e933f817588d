"""FIFO queues through boto3, answered as AWS answers (its texts are those AWS sent)."""

from __future__ import annotations

import hashlib
import json
import time
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


def test_a_delay_of_zero_is_taken_and_any_other_refused(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue(".fifo", FifoQueue="true", ContentBasedDeduplication="true")
    sent = sqs.send_message(QueueUrl=url, MessageBody="now", MessageGroupId="g", DelaySeconds=0)
    assert "MessageId" in sent
    with pytest.raises(ClientError) as refused:
        sqs.send_message(QueueUrl=url, MessageBody="later", MessageGroupId="g", DelaySeconds=2)
    assert _refusal(refused) == (
        "InvalidParameterValue",
        "Value 2 for parameter DelaySeconds is invalid. Reason: The request include parameter "
        "that is not valid for this queue type.",
    )
    (got,) = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
    assert got["Body"] == "now"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"MessageDeduplicationId": "d"}, "The request must contain the parameter MessageGroupId."),
        (
            {"MessageGroupId": "g"},
            "The queue should either have ContentBasedDeduplication enabled or "
            "MessageDeduplicationId provided explicitly",
        ),
    ],
)
def test_a_batch_with_an_entry_a_fifo_queue_cannot_take_is_refused_whole(
    sqs: Any, new_queue: NewQueue, entry: dict[str, str], message: str
) -> None:
    url = new_queue(".fifo", FifoQueue="true")
    good = {
        "Id": "good",
        "MessageBody": "fine",
        "MessageGroupId": "g",
        "MessageDeduplicationId": "1",
    }
    with pytest.raises(ClientError) as refused:
        sqs.send_message_batch(
            QueueUrl=url, Entries=[good, {"Id": "bad", "MessageBody": "x", **entry}]
        )
    assert _refusal(refused) == ("InvalidParameterValue", message)
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)  # nothing sent


def test_a_message_says_its_group_deduplication_id_and_sequence_number(
    sqs: Any, new_queue: NewQueue
) -> None:
    url = new_queue(".fifo", FifoQueue="true")
    sent = sqs.send_message(
        QueueUrl=url, MessageBody="m", MessageGroupId="g", MessageDeduplicationId="d-1"
    )
    (got,) = sqs.receive_message(QueueUrl=url, AttributeNames=["All"], WaitTimeSeconds=1)[
        "Messages"
    ]
    attributes = got["Attributes"]
    assert attributes["MessageGroupId"] == "g"
    assert attributes["MessageDeduplicationId"] == "d-1"
    assert attributes["SequenceNumber"] == sent["SequenceNumber"]
    only = sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=got["ReceiptHandle"], VisibilityTimeout=0
    )
    assert only["ResponseMetadata"]["HTTPStatusCode"] == 200
    (again,) = sqs.receive_message(
        QueueUrl=url, AttributeNames=["MessageDeduplicationId"], WaitTimeSeconds=1
    )["Messages"]
    assert again["Attributes"] == {"MessageDeduplicationId": "d-1"}


def test_a_dead_letter_queue_is_of_its_source_queue_s_type(sqs: Any, new_queue: NewQueue) -> None:
    fifo, standard = new_queue(".fifo", FifoQueue="true"), new_queue()
    arns = {
        url: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        for url in (fifo, standard)
    }
    for source, target in ((fifo, standard), (standard, fifo)):
        policy = json.dumps({"deadLetterTargetArn": arns[target], "maxReceiveCount": 3})
        with pytest.raises(ClientError) as refused:
            sqs.set_queue_attributes(QueueUrl=source, Attributes={"RedrivePolicy": policy})
        code, message = _refusal(refused)
        assert code == "InvalidParameterValue" and "same type of queue" in message
        shown = sqs.get_queue_attributes(QueueUrl=source, AttributeNames=["All"])["Attributes"]
        assert "RedrivePolicy" not in shown  # nothing changed
    fifo_dead = new_queue(".fifo", FifoQueue="true")
    arn = sqs.get_queue_attributes(QueueUrl=fifo_dead, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 3})
    sqs.set_queue_attributes(QueueUrl=fifo, Attributes={"RedrivePolicy": policy})


def _bodies(answer: dict[str, Any]) -> list[str]:
    return [m["Body"] for m in answer.get("Messages", [])]


def test_a_receive_takes_several_of_a_group_in_order_and_the_group_waits_for_them(
    sqs: Any, new_queue: NewQueue
) -> None:
    url = new_queue(".fifo", FifoQueue="true", ContentBasedDeduplication="true")
    sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": str(i), "MessageBody": f"g{i}", "MessageGroupId": "g"} for i in range(1, 6)
        ],
    )
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=3, WaitTimeSeconds=1)
    assert _bodies(first) == ["g1", "g2", "g3"]
    # The group waits while any of the three is in flight
    assert _bodies(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)) == []
    handles = [m["ReceiptHandle"] for m in first["Messages"]]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=handles[0])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=handles[1])
    assert _bodies(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)) == []
    # The last one's lease ends: it comes back first, and the rest follow it
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handles[2], VisibilityTimeout=0)
    again = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        WaitTimeSeconds=1,
        AttributeNames=["ApproximateReceiveCount"],
    )
    assert _bodies(again) == ["g3", "g4", "g5"]
    counts = [m["Attributes"]["ApproximateReceiveCount"] for m in again["Messages"]]
    assert counts == ["2", "1", "1"]


def test_a_group_whose_message_is_dead_lettered_moves_on_at_once(
    sqs: Any, new_queue: NewQueue
) -> None:
    dead = new_queue(".fifo", FifoQueue="true")
    arn = sqs.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    url = new_queue(
        ".fifo",
        FifoQueue="true",
        ContentBasedDeduplication="true",
        VisibilityTimeout="1",
        RedrivePolicy=json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 1}),
    )
    for body in ("first", "second"):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="g")
    assert _bodies(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)) == ["first"]
    # Its one receive is used: when its lease ends it moves, and its group goes on
    time.sleep(1.2)
    started = time.monotonic()
    assert _bodies(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)) == ["second"]
    assert time.monotonic() - started < 0.8
    assert _bodies(sqs.receive_message(QueueUrl=dead, WaitTimeSeconds=1)) == ["first"]


def test_content_deduplication_is_by_the_body_s_sha256_and_says_so(
    sqs: Any, new_queue: NewQueue
) -> None:
    url = new_queue(".fifo", FifoQueue="true", ContentBasedDeduplication="true")
    first = sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
    other = {"note": {"DataType": "String", "StringValue": "attributes are not hashed"}}
    again = sqs.send_message(
        QueueUrl=url, MessageBody="same", MessageGroupId="g", MessageAttributes=other
    )
    assert again["MessageId"] == first["MessageId"]
    (got,) = sqs.receive_message(
        QueueUrl=url, AttributeNames=["MessageDeduplicationId"], WaitTimeSeconds=1
    )["Messages"]
    digest = hashlib.sha256(b"same").hexdigest()
    assert got["Attributes"] == {"MessageDeduplicationId": digest}
