"""SNS's refusals through boto3, in the words AWS answered (recorded from AWS itself)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.servers import require_module
from tests.sqs.conftest import queue_arn, sqs_client
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


TEXT = {"DataType": "String", "StringValue": "v"}
# (attributes, code, message): AWS's recorded refusals of a publish's attributes
MALFORMED_ATTRIBUTES = [
    ({"attr1": {"DataType": "String", "StringValue": ""}}, "ParameterValueInvalid",
     "The message attribute 'attr1' must contain non-empty message attribute value for "
     "message attribute type 'String'."),
    ({"attr1": {"DataType": "String"}}, "ParameterValueInvalid",
     "The message attribute 'attr1' must contain non-empty message attribute value for "
     "message attribute type 'String'."),
    ({"attr1": {"DataType": "Binary", "BinaryValue": b""}}, "ParameterValueInvalid",
     "The message attribute 'attr1' must contain non-empty message attribute value for "
     "message attribute type 'Binary'."),
    ({"attr1": {"DataType": "String", "BinaryValue": b"123"}}, "ParameterValueInvalid",
     "The message attribute 'attr1' with type 'String' must use field 'String'."),
    ({"attr1": {"DataType": "Number", "BinaryValue": b"123"}}, "ParameterValueInvalid",
     "The message attribute 'attr1' with type 'Number' must use field 'String'."),
    ({"attr1": {"DataType": "Binary", "StringValue": "123"}}, "ParameterValueInvalid",
     "The message attribute 'attr1' with type 'Binary' must use field 'Binary'."),
    ({"attr1": {"DataType": "InvalidType", "StringValue": "123"}}, "ParameterValueInvalid",
     "The message attribute 'attr1' has an invalid message attribute type, the set of "
     "supported type prefixes is Binary, Number, and String."),
    ({"a" * 257: TEXT}, "ParameterValueInvalid",
     "Length of message attribute name must be less than 256 bytes."),
    ({"a^*?": TEXT}, "ParameterValueInvalid",
     "Invalid non-alphanumeric character '#x5E' was found in the message attribute name. "
     "Can only include alphanumeric characters, hyphens, underscores, or dots."),
    ({".abc": TEXT}, "ParameterValueInvalid",
     "Invalid message attribute name starting with character '.' was found."),
    ({"abc.": TEXT}, "ParameterValueInvalid",
     "Invalid message attribute name ending with character '.' was found."),
    ({"a..bc": TEXT}, "ParameterValueInvalid",
     "Message attribute name can not have successive '.' character."),
    ({"attr1": {"StringValue": "value"}}, "ValidationError",
     "1 validation error detected: Value null at '{where}messageAttributes.attr1.member."
     "dataType' failed to satisfy constraint: Member must not be null"),
]  # fmt: skip


@pytest.mark.parametrize(("attributes", "code", "message"), MALFORMED_ATTRIBUTES)
def test_a_malformed_attribute_is_refused_in_sns_s_words_whole_batch_and_all(
    node: str, attributes: dict[str, Any], code: str, message: str
) -> None:
    sns = sqs_client(node, "sns", validate=False)  # as AWS's recording sent them
    try:
        topic = new_topic(sns)
        refused = _refusal(sns.publish, TopicArn=topic, Message="m", MessageAttributes=attributes)
        assert refused == (code, message.format(where=""))
        entries = [
            {"Id": "1", "Message": "m", "MessageAttributes": attributes},
            {"Id": "3", "Message": "valid"},
        ]
        where = "publishBatchRequestEntries.1.member."
        refused = _refusal(sns.publish_batch, TopicArn=topic, PublishBatchRequestEntries=entries)
        assert refused == (code, message.format(where=where))
    finally:
        sns.close()


def test_batches_and_sizes_are_refused_in_sns_s_words(sns: Any) -> None:
    topic = new_topic(sns)

    def batch(entries: list[dict[str, Any]]) -> tuple[str, str]:
        return _refusal(sns.publish_batch, TopicArn=topic, PublishBatchRequestEntries=entries)

    one = {"Message": "m"}
    assert batch([{"Id": "1", **one}, {"Id": "1", **one}]) == (
        "BatchEntryIdsNotDistinct",
        "Two or more batch entries in the request have the same Id.",
    )
    assert batch([{"Id": str(i), **one} for i in range(11)]) == (
        "TooManyEntriesInBatchRequest",
        "The batch request contains more entries than permissible.",
    )
    assert batch([{"Id": "message.id", **one}]) == (
        "InvalidBatchEntryId",
        "The Id of a batch entry in the batch request contains an impermissible character: "
        "message.id",
    )
    assert batch([{"Id": "a" * 81, **one}]) == (
        "InvalidBatchEntryId",
        f"The Id of a batch entry in the batch request is too long: {'a' * 81}",
    )
    half = 262144 // 2
    assert batch(
        [{"Id": "1", "Message": "a" * half}, {"Id": "2", "Message": "b" * (half + 1)}]
    ) == (
        "BatchRequestTooLong",
        "The length of all the messages put together is more than the limit.",
    )
    assert _refusal(sns.publish, TopicArn=topic, Message="This is a test message" * 12000) == (
        "InvalidParameter",
        "Invalid parameter: Message too long",
    )
    attributes = {"attr1": {"DataType": "Number", "StringValue": "1"}}
    counted = len("attr1") + len("Number") + len("1")  # names, types and values count
    assert sns.publish(
        TopicArn=topic, Message="a" * (262144 - counted), MessageAttributes=attributes
    )["MessageId"]
    assert _refusal(
        sns.publish,
        TopicArn=topic,
        Message="a" * (262144 - counted + 1),
        MessageAttributes=attributes,
    ) == ("InvalidParameter", "Invalid parameter: Message too long")
    assert _refusal(sns.publish, TopicArn=topic, Message="{not json", MessageStructure="json") == (
        "InvalidParameter",
        "Invalid parameter: Message Structure - JSON message body failed to parse",
    )
    elsewhere = topic.replace(":us-east-1:", ":eu-west-1:")
    assert _refusal(sns.publish, TopicArn=elsewhere, Message="m") == (
        "InvalidParameter",
        "Invalid parameter: TopicArn",
    )


def test_subscriptions_are_made_once_and_refused_in_sns_s_words(
    sns: Any, sqs: Any, new_queue: Any
) -> None:
    topic = new_topic(sns)
    endpoint = queue_arn(sqs, new_queue())

    def subscribe(**attributes: str) -> str:
        return str(
            sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=endpoint, Attributes=attributes)[
                "SubscriptionArn"
            ]
        )

    arn = subscribe(RawMessageDelivery="True")
    # the same again, defaults said or not, or nothing at all: the same subscription
    assert subscribe(RawMessageDelivery="true") == arn
    assert subscribe(RawMessageDelivery="true", FilterPolicyScope="MessageAttributes") == arn
    assert subscribe() == arn
    assert subscribe(FilterPolicyScope="MessageAttributes") == arn
    assert _refusal(
        sns.subscribe,
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=endpoint,
        Attributes={"RawMessageDelivery": "false", "FilterPolicyScope": "MessageBody"},
    ) == (
        "InvalidParameter",
        "Invalid parameter: Attributes Reason: Subscription already exists with different "
        "attributes",
    )
    assert (
        sns.get_subscription_attributes(SubscriptionArn=arn)["Attributes"]["RawMessageDelivery"]
        == "true"
    )
    other = queue_arn(sqs, new_queue())
    assert _refusal(
        sns.subscribe,
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=other,
        Attributes={"RawMessageDelivery": "wrongvalue"},
    ) == (
        "InvalidParameter",
        "Invalid parameter: Attributes Reason: RawMessageDelivery: Invalid value [wrongvalue]. "
        "Must be true or false.",
    )
    assert _refusal(
        sns.set_subscription_attributes,
        SubscriptionArn=arn,
        AttributeName="RawMessageDelivery",
        AttributeValue="test-ValUe",
    ) == (
        "InvalidParameter",
        "Invalid parameter: RawMessageDelivery: Invalid value [test-ValUe]. Must be true or false.",
    )
    assert _refusal(sns.subscribe, TopicArn=topic, Protocol="test-protocol", Endpoint="x") == (
        "InvalidParameter",
        "Invalid parameter: Amazon SNS does not support this protocol string: test-protocol",
    )
    unsubscribes = [
        ("randomstring", "SubscriptionArn Reason: An ARN must have at least 6 elements, not 1"),
        (
            "arn:aws:sns:us-east-1:random",
            "SubscriptionArn Reason: An ARN must have at least 6 elements, not 5",
        ),
        ("arn:aws:sns:us-east-1:111111111111:random", "SubscriptionId"),
    ]
    for given, said in unsubscribes:
        assert _refusal(sns.unsubscribe, SubscriptionArn=given) == (
            "InvalidParameter",
            f"Invalid parameter: {said}",
        )
