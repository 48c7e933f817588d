"""Topic management through boto3: attributes kept and shown with SNS's defaults, tags,
permissions edited in the stored policy, and SNS's rules for names, each refusal in
its words."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.servers import require_module
from tests.sqs.conftest import queue_arn
from tests.sqs.test_sns import drain, new_topic

require_module("boto3", "test")

from botocore.exceptions import ClientError  # noqa: E402


def refusal(caught: pytest.ExceptionInfo[ClientError]) -> tuple[str, str]:
    error = caught.value.response["Error"]
    return error["Code"], error["Message"]


def test_attributes_are_kept_and_shown_with_sns_defaults(sns: Any) -> None:
    name = f"t-{uuid.uuid4().hex[:10]}"
    arn = sns.create_topic(
        Name=name, Attributes={"DisplayName": "Orders"}, Tags=[{"Key": "team", "Value": "a"}]
    )["TopicArn"]
    shown = sns.get_topic_attributes(TopicArn=arn)["Attributes"]
    assert shown["DisplayName"] == "Orders" and shown["Owner"] == "000000000000"
    policy = json.loads(shown["Policy"])
    assert policy["Id"] == "__default_policy_ID"
    assert policy["Statement"][0]["Resource"] == arn
    effective = json.loads(shown["EffectiveDeliveryPolicy"])
    assert effective["http"]["defaultHealthyRetryPolicy"]["numRetries"] == 3
    assert "FifoTopic" not in shown

    delivery = {"http": {"defaultHealthyRetryPolicy": {"numRetries": 5}}}
    for attribute, value in {
        "DisplayName": "Orders 2",
        "DeliveryPolicy": json.dumps(delivery),
        "SignatureVersion": "2",
        "TracingConfig": "Active",
        "KmsMasterKeyId": "alias/aws/sns",
    }.items():
        sns.set_topic_attributes(TopicArn=arn, AttributeName=attribute, AttributeValue=value)
    shown = sns.get_topic_attributes(TopicArn=arn)["Attributes"]
    assert (shown["DisplayName"], shown["SignatureVersion"], shown["TracingConfig"]) == (
        "Orders 2",
        "2",
        "Active",
    )
    assert json.loads(shown["DeliveryPolicy"]) == delivery
    effective = json.loads(shown["EffectiveDeliveryPolicy"])["http"]
    assert effective["defaultHealthyRetryPolicy"] == {
        "minDelayTarget": 20,
        "maxDelayTarget": 20,
        "numRetries": 5,  # what the policy sets, AWS's defaults for the rest
        "numMaxDelayRetries": 0,
        "numNoDelayRetries": 0,
        "numMinDelayRetries": 0,
        "backoffFunction": "linear",
    }
    assert effective["defaultRequestPolicy"]["headerContentType"] == "text/plain; charset=UTF-8"

    refused = [
        ("Nonsense", "x"),
        ("SignatureVersion", "3"),
        ("ContentBasedDeduplication", "true"),  # a standard topic has none
        ("DeliveryPolicy", "[1]"),
        ("DeliveryPolicy", '{"http": 5}'),
        ("DeliveryPolicy", '{"http": {"defaultHealthyRetryPolicy": {"numRetries": 101}}}'),
    ]
    for attribute, value in refused:
        with pytest.raises(sns.exceptions.InvalidParameterException):
            sns.set_topic_attributes(TopicArn=arn, AttributeName=attribute, AttributeValue=value)
    assert sns.get_topic_attributes(TopicArn=arn)["Attributes"]["SignatureVersion"] == "2"

    # creating it again: the same ARN, unless other attributes or tags are asked for
    assert sns.create_topic(Name=name)["TopicArn"] == arn
    with pytest.raises(ClientError) as caught:
        sns.create_topic(Name=name, Attributes={"DisplayName": "Other"})
    assert refusal(caught) == (
        "InvalidParameter",
        "Invalid parameter: Attributes Reason: Topic already exists with different attributes",
    )
    with pytest.raises(ClientError) as caught:
        sns.create_topic(Name=name, Tags=[{"Key": "team", "Value": "b"}])
    assert refusal(caught)[1] == (
        "Invalid parameter: Tags Reason: Topic already exists with different tags"
    )


def test_tags_are_set_changed_and_removed(sns: Any) -> None:
    arn = new_topic(sns)
    sns.tag_resource(
        ResourceArn=arn, Tags=[{"Key": "k1", "Value": "v1"}, {"Key": "k2", "Value": "v2"}]
    )
    assert sns.list_tags_for_resource(ResourceArn=arn)["Tags"] == [
        {"Key": "k1", "Value": "v1"},
        {"Key": "k2", "Value": "v2"},
    ]
    sns.untag_resource(ResourceArn=arn, TagKeys=["k1"])
    sns.tag_resource(ResourceArn=arn, Tags=[{"Key": "k2", "Value": "v2b"}])
    assert sns.list_tags_for_resource(ResourceArn=arn)["Tags"] == [{"Key": "k2", "Value": "v2b"}]
    with pytest.raises(ClientError) as caught:
        sns.tag_resource(
            ResourceArn=arn, Tags=[{"Key": "k", "Value": "1"}, {"Key": "k", "Value": "2"}]
        )
    assert refusal(caught) == (
        "InvalidParameter",
        "Invalid parameter: Duplicated keys are not allowed.",
    )
    sns.delete_topic(TopicArn=arn)
    with pytest.raises(ClientError) as caught:
        sns.list_tags_for_resource(ResourceArn=arn)
    assert refusal(caught) == ("ResourceNotFound", "Resource does not exist")


def test_permissions_edit_the_stored_policy(sns: Any) -> None:
    arn = new_topic(sns)
    sns.add_permission(
        TopicArn=arn, Label="publishers", AWSAccountId=["111122223333"], ActionName=["Publish"]
    )
    statements = json.loads(sns.get_topic_attributes(TopicArn=arn)["Attributes"]["Policy"])[
        "Statement"
    ]
    assert [s["Sid"] for s in statements] == ["__default_statement_ID", "publishers"]
    assert statements[1] == {
        "Sid": "publishers",
        "Effect": "Allow",
        "Principal": {"AWS": "arn:aws:iam::111122223333:root"},
        "Action": "SNS:Publish",
        "Resource": arn,
    }
    with pytest.raises(ClientError) as caught:
        sns.add_permission(
            TopicArn=arn, Label="publishers", AWSAccountId=["111122223333"], ActionName=["Publish"]
        )
    assert refusal(caught) == ("InvalidParameter", "Invalid parameter: Statement already exists")
    with pytest.raises(ClientError) as caught:
        sns.add_permission(
            TopicArn=arn, Label="other", AWSAccountId=["111122223333"], ActionName=["Dance"]
        )
    assert refusal(caught)[1] == "Invalid parameter: Policy statement action out of service scope!"
    sns.remove_permission(TopicArn=arn, Label="publishers")
    policy = json.loads(sns.get_topic_attributes(TopicArn=arn)["Attributes"]["Policy"])
    assert [s["Sid"] for s in policy["Statement"]] == ["__default_statement_ID"]
    missing = arn + "-missing"
    with pytest.raises(ClientError) as caught:
        sns.remove_permission(TopicArn=missing, Label="publishers")
    assert refusal(caught) == ("NotFound", "Topic does not exist")


def test_topic_names_follow_sns_rules(sns: Any) -> None:
    longest = "t" * 256
    arn = sns.create_topic(Name=longest)["TopicArn"]
    assert arn.endswith(f":{longest}")
    sns.delete_topic(TopicArn=arn)
    fifo = sns.create_topic(Name=f"{'f' * 256}.fifo", Attributes={"FifoTopic": "true"})
    shown = sns.get_topic_attributes(TopicArn=fifo["TopicArn"])["Attributes"]
    assert (shown["FifoTopic"], shown["ContentBasedDeduplication"]) == ("true", "false")
    sns.set_topic_attributes(
        TopicArn=fifo["TopicArn"], AttributeName="ContentBasedDeduplication", AttributeValue="true"
    )
    shown = sns.get_topic_attributes(TopicArn=fifo["TopicArn"])["Attributes"]
    assert shown["ContentBasedDeduplication"] == "true"
    sns.delete_topic(TopicArn=fifo["TopicArn"])
    before = sns.list_topics()["Topics"]
    for name, attributes in [
        ("", {}),
        ("t" * 257, {}),
        ("no:_invalidchar", {}),
        ("with space", {}),
        ("dots.in.name", {}),
        ("plain.fifo", {}),
        ("plain", {"FifoTopic": "true"}),
    ]:
        with pytest.raises(ClientError) as caught:
            sns.create_topic(Name=name, Attributes=attributes)
        assert refusal(caught) == ("InvalidParameter", "Invalid parameter: Topic Name"), name
    assert sns.list_topics()["Topics"] == before


def test_a_fifo_topic_deduplicates_by_content_into_fifo_and_standard_queues(
    sns: Any, sqs: Any, new_queue: Any
) -> None:
    topic = new_topic(sns, ".fifo", FifoTopic="true", ContentBasedDeduplication="true")
    ordered, plain = new_queue(".fifo", FifoQueue="true"), new_queue()
    for url in (ordered, plain):
        sns.subscribe(
            TopicArn=topic,
            Protocol="sqs",
            Endpoint=queue_arn(sqs, url),
            Attributes={"RawMessageDelivery": "true"},
        )
    for body in ("one", "two", "one", "three"):  # the second "one" is a duplicate
        sns.publish(TopicArn=topic, Message=body, MessageGroupId="g")
    got = drain(sqs, ordered, 3, attributes=True)
    assert [m["Body"] for m in got] == ["one", "two", "three"]
    answer = sqs.receive_message(QueueUrl=plain, MaxNumberOfMessages=10, AttributeNames=["All"])
    assert sorted(m["Body"] for m in answer["Messages"]) == ["one", "three", "two"]
    first = next(m for m in answer["Messages"] if m["Body"] == "one")
    assert first["Attributes"]["MessageDeduplicationId"] == hashlib.sha256(b"one").hexdigest()

    standard = new_topic(sns)
    checks: list[tuple[Callable[[], object], str]] = [
        (
            lambda: sns.subscribe(
                TopicArn=standard, Protocol="sqs", Endpoint=queue_arn(sqs, ordered)
            ),
            "Invalid parameter: Invalid parameter: Endpoint Reason: "
            "FIFO SQS Queues can not be subscribed to standard SNS topics",
        ),
        (
            lambda: sns.publish(TopicArn=standard, Message="m", MessageDeduplicationId="d"),
            "Invalid parameter: MessageDeduplicationId Reason: The request includes "
            "MessageDeduplicationId parameter that is not valid for this topic type",
        ),
        (
            lambda: sns.publish(
                TopicArn=new_topic(sns, ".fifo", FifoTopic="true"), Message="m", MessageGroupId="g"
            ),
            "Invalid parameter: The topic should either have ContentBasedDeduplication "
            "enabled or MessageDeduplicationId provided explicitly",
        ),
    ]
    for act, said in checks:
        with pytest.raises(ClientError) as caught:
            act()
        assert refusal(caught) == ("InvalidParameter", said)
