"""SQS's finer behaviour through boto3, as AWS documents and answers it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing
from typing import Any

import pytest

from tests.servers import require_module

require_module("boto3", "test")

from botocore.exceptions import ClientError  # noqa: E402

NewQueue = Callable[..., str]


def _counts(sqs: Any, url: str) -> list[str]:
    got = sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])
    return [m["Attributes"]["ApproximateReceiveCount"] for m in got.get("Messages", [])]


def test_a_visibility_timeout_of_zero_leaves_a_message_visible_at_once(
    sqs: Any, new_queue: NewQueue
) -> None:
    # A receive that asks for 0
    url = new_queue()
    sqs.send_message(QueueUrl=url, MessageBody="m")
    first = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]
    assert [m["Body"] for m in first] == ["m"]
    assert _counts(sqs, url) == ["2"]  # the next receive has it again
    # A queue whose own timeout is 0
    zero = new_queue(VisibilityTimeout="0")
    shown = sqs.get_queue_attributes(QueueUrl=zero, AttributeNames=["VisibilityTimeout"])
    assert shown["Attributes"] == {"VisibilityTimeout": "0"}
    sqs.send_message(QueueUrl=zero, MessageBody="m")
    assert [_counts(sqs, zero) for _ in range(3)] == [["1"], ["2"], ["3"]]


def test_message_attribute_names_take_all_and_wildcards(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue(VisibilityTimeout="0")
    attributes = {
        "app.one": {"DataType": "String", "StringValue": "1"},
        "app.two": {"DataType": "Number", "StringValue": "2"},
        "other": {"DataType": "String", "StringValue": "3"},
    }
    sqs.send_message(QueueUrl=url, MessageBody="m", MessageAttributes=attributes)
    for names, shown in (
        (["All"], ["app.one", "app.two", "other"]),
        ([".*"], ["app.one", "app.two", "other"]),
        (["app.*"], ["app.one", "app.two"]),
        (["other", "app.two"], ["app.two", "other"]),
        (["none.*"], []),
    ):
        (got,) = sqs.receive_message(QueueUrl=url, MessageAttributeNames=names)["Messages"]
        assert sorted(got.get("MessageAttributes", {})) == shown, names


def test_a_trace_header_is_kept_and_returned(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue()
    trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    sent = sqs.send_message(
        QueueUrl=url,
        MessageBody="traced",
        MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": trace}},
    )
    assert "MD5OfMessageSystemAttributes" in sent
    (got,) = sqs.receive_message(QueueUrl=url, AttributeNames=["AWSTraceHeader"])["Messages"]
    assert got["Attributes"] == {"AWSTraceHeader": trace}


def test_tagging_with_no_tags_is_refused(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue()
    for call, given in ((sqs.tag_queue, {"Tags": {}}), (sqs.untag_queue, {"TagKeys": []})):
        with pytest.raises(ClientError) as refused:
            call(QueueUrl=url, **given)
        error = refused.value.response["Error"]
        assert error["Code"] == "MissingParameter"
        assert error["Message"].startswith("The request must contain the parameter Tag")


MIB = 1 << 20


def test_a_message_of_one_mebibyte_goes_through_and_one_byte_more_is_refused(
    sqs: Any, new_queue: NewQueue
) -> None:
    url = new_queue()
    shown = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["MaximumMessageSize"])
    assert shown["Attributes"] == {"MaximumMessageSize": str(MIB)}
    attributes = {"kind": {"DataType": "String", "StringValue": "big"}}
    body = "x" * (MIB - len("kind") - len("String") - len("big"))  # body and attributes: 1 MiB
    sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attributes)
    (got,) = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"], WaitTimeSeconds=1)[
        "Messages"
    ]  # boto3 checks the MD5s
    assert got["Body"] == body and got["MessageAttributes"]["kind"]["StringValue"] == "big"
    with pytest.raises(ClientError) as refused:
        sqs.send_message(QueueUrl=url, MessageBody=body + "y", MessageAttributes=attributes)
    error = refused.value.response["Error"]
    assert (error["Code"], error["Message"]) == (
        "InvalidParameterValue",
        f"One or more parameters are invalid. Reason: Message must be shorter than {MIB} bytes.",
    )


def test_a_body_larger_than_the_node_takes_is_refused_in_sqs_s_shape(
    sqs: Any, new_queue: NewQueue
) -> None:
    url = new_queue()
    huge = "x" * (5 * MIB)  # beyond what the node takes in one request
    for send, given, code in (
        (sqs.send_message, {"MessageBody": huge}, "InvalidParameterValue"),
        (
            sqs.send_message_batch,
            {"Entries": [{"Id": "1", "MessageBody": huge}]},
            "AWS.SimpleQueueService.BatchRequestTooLong",  # the code AWS answers
        ),
    ):
        with pytest.raises(ClientError) as refused:
            send(QueueUrl=url, **given)
        answer = refused.value.response
        assert answer["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert answer["Error"]["Code"] == code


@pytest.mark.parametrize("name", ["MessageGroupId", "MessageDeduplicationId"])
@pytest.mark.parametrize("value", ["", "group 123", "a" * 129])
def test_an_invalid_group_or_deduplication_id_is_refused_in_aws_s_words(
    sqs: Any, new_queue: NewQueue, name: str, value: str
) -> None:
    url = new_queue(".fifo", FifoQueue="true", ContentBasedDeduplication="true")
    given = {"MessageGroupId": "g", name: value}
    with pytest.raises(ClientError) as refused:
        sqs.send_message(QueueUrl=url, MessageBody="m", **given)
    error = refused.value.response["Error"]
    assert (error["Code"], error["Message"]) == (
        "InvalidParameterValue",
        f"Value {value} for parameter {name} is invalid. Reason: {name} can only include "
        "alphanumeric and punctuation characters. 1 to 128 in length.",
    )


def test_an_empty_attribute_is_refused_in_aws_s_words(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue()
    with pytest.raises(ClientError) as refused:
        sqs.send_message(
            QueueUrl=url,
            MessageBody="m",
            MessageAttributes={"ErrorDetails": {"DataType": "String", "StringValue": ""}},
        )
    assert refused.value.response["Error"]["Message"] == (
        "Message (user) attribute 'ErrorDetails' must contain a non-empty value of type 'String'."
    )


def _error(exc: pytest.ExceptionInfo[ClientError]) -> tuple[str, str]:
    error = exc.value.response["Error"]
    return error["Code"], error["Message"]


def test_refusals_use_aws_s_words(sqs: Any, new_queue: NewQueue) -> None:
    """Texts AWS sent (recorded answers), or, where none was recorded, its documented ones."""
    url = new_queue()
    refusals: list[tuple[Any, dict[str, Any], tuple[str, str]]] = [
        (
            sqs.create_queue,
            {"QueueName": "bad name!"},
            (
                "InvalidParameterValue",
                "Can only include alphanumeric characters, hyphens, or underscores. "
                "1 to 80 in length",
            ),
        ),
        (
            sqs.create_queue,
            {"QueueName": "plain", "Attributes": {"FifoQueue": "true"}},
            (
                "InvalidParameterValue",
                "The name of a FIFO queue can only include alphanumeric characters, hyphens, "
                "or underscores, must end with .fifo suffix and be 1 to 80 in length",
            ),
        ),
        (
            sqs.send_message_batch,
            {"QueueUrl": url, "Entries": []},
            (
                "AWS.SimpleQueueService.EmptyBatchRequest",
                "There should be at least one SendMessageBatchRequestEntry in the request.",
            ),
        ),
        (
            sqs.send_message_batch,
            {
                "QueueUrl": url,
                "Entries": [{"Id": str(i), "MessageBody": "x"} for i in range(11)],
            },
            (
                "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
                "Maximum number of entries per request are 10. You have sent 11.",
            ),
        ),
        (
            sqs.send_message_batch,
            {"QueueUrl": url, "Entries": [{"Id": "no spaces", "MessageBody": "x"}]},
            (
                "AWS.SimpleQueueService.InvalidBatchEntryId",
                "A batch entry id can only contain alphanumeric characters, hyphens and "
                "underscores. It can be at most 80 letters long.",
            ),
        ),
        (
            sqs.delete_message,
            {"QueueUrl": url, "ReceiptHandle": "garbage"},
            (
                "ReceiptHandleIsInvalid",
                'The input receipt handle "garbage" is not a valid receipt handle.',
            ),
        ),
        (
            sqs.receive_message,
            {"QueueUrl": url, "MaxNumberOfMessages": 11},
            (
                "InvalidParameterValue",
                "Value 11 for parameter MaxNumberOfMessages is invalid. Reason: Must be between "
                "1 and 10, if provided.",
            ),
        ),
        (
            sqs.receive_message,
            {"QueueUrl": url, "WaitTimeSeconds": 21},
            (
                "InvalidParameterValue",
                "Value 21 for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and "
                "<= 20, if provided.",
            ),
        ),
        (
            sqs.get_queue_attributes,
            {"QueueUrl": url, "AttributeNames": ["NoSuchAttribute"]},
            ("InvalidAttributeName", "Unknown Attribute NoSuchAttribute."),
        ),
        (
            sqs.send_message,
            {
                "QueueUrl": url,
                "MessageBody": "x",
                "MessageAttributes": {"a": {"DataType": "Text", "StringValue": "v"}},
            },
            (
                "InvalidParameterValue",
                "The message attribute 'a' has an invalid message attribute type, the set of "
                "supported type prefixes is Binary, Number, and String.",
            ),
        ),
        (
            sqs.get_queue_url,
            {"QueueName": "no-such-queue"},
            ("AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist."),
        ),
        (  # an empty body is a missing one
            sqs.send_message,
            {"QueueUrl": url, "MessageBody": ""},
            ("MissingParameter", "The request must contain the parameter MessageBody."),
        ),
        (  # a standard queue has no such attribute, whatever its value
            sqs.create_queue,
            {"QueueName": "standard-x", "Attributes": {"FifoQueue": "false"}},
            ("InvalidAttributeName", "Unknown Attribute FifoQueue."),
        ),
    ]
    for action, given, refusal in refusals:
        with pytest.raises(ClientError) as refused:
            action(**given)
        assert _error(refused) == refusal, given


def test_a_queue_created_again_differently_is_refused_naming_the_attribute(
    sqs: Any, new_queue: NewQueue
) -> None:
    url = new_queue(DelaySeconds="5")
    name = url.rsplit("/", 1)[1]
    assert sqs.create_queue(QueueName=name, Attributes={"DelaySeconds": "5"})["QueueUrl"] == url
    with pytest.raises(ClientError) as refused:
        sqs.create_queue(QueueName=name, Attributes={"DelaySeconds": "1"})
    assert _error(refused) == (
        "QueueAlreadyExists",
        "A queue already exists with the same name and a different value for attribute "
        "DelaySeconds",
    )


def test_a_request_signed_for_another_region_is_refused(
    sqs: Any, new_queue: NewQueue, node: str
) -> None:
    from tests.sqs.conftest import sqs_client

    url = new_queue()
    with (
        pytest.raises(ClientError) as refused,
        closing(sqs_client(node, region="us-west-2")) as west,
    ):
        west.send_message(QueueUrl=url, MessageBody="meant for us-west-2")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert _error(refused) == (
        "SignatureDoesNotMatch",
        "Credential should be scoped to a valid region, not 'us-west-2'.",
    )
    with (
        pytest.raises(ClientError) as refused,
        closing(sqs_client(node, "sns", region="us-west-2")) as sns,
    ):
        sns.list_topics()
    assert refused.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # nothing reached the queue
