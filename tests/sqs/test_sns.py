"""SNS through boto3 (the query protocol, XML answers) on a live node of each store:
topics fan out to subscribed queues, filtered, raw or in SNS's envelope."""

from __future__ import annotations

import hashlib
import json
import urllib.request
import uuid
from typing import Any

import pytest

from tests.servers import require_module
from tests.sqs.conftest import queue_arn

require_module("boto3", "test")

from botocore.exceptions import ClientError  # noqa: E402

ORDER_ATTRIBUTES = {"amount": {"DataType": "Number", "StringValue": "250"}}


def code_of(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def drain(sqs: Any, url: str, want: int, attributes: bool = False) -> list[dict[str, Any]]:
    """Receive and delete ``want`` messages (and check that no more come)."""
    got: list[dict[str, Any]] = []
    extra = {"MessageAttributeNames": ["All"]} if attributes else {}
    while len(got) < want:
        answer = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=3, **extra
        )
        assert "Messages" in answer, f"only {len(got)} of {want} arrived"
        got += answer["Messages"]
        for m in answer["Messages"]:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)
    return got


def new_topic(sns: Any, suffix: str = "", **attributes: str) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}{suffix}"
    return str(sns.create_topic(Name=name, Attributes=attributes)["TopicArn"])


def test_a_topic_from_creation_to_deletion(sns: Any) -> None:
    arn = new_topic(sns)
    name = arn.rsplit(":", 1)[1]
    assert arn == f"arn:aws:sns:us-east-1:000000000000:{name}"
    assert sns.create_topic(Name=name)["TopicArn"] == arn  # creating again: the same topic
    assert {"TopicArn": arn} in sns.list_topics()["Topics"]
    shown = sns.get_topic_attributes(TopicArn=arn)["Attributes"]
    assert shown["TopicArn"] == arn and shown["SubscriptionsConfirmed"] == "0"
    sns.delete_topic(TopicArn=arn)
    sns.delete_topic(TopicArn=arn)  # deleting a topic that is gone is no error
    assert {"TopicArn": arn} not in sns.list_topics()["Topics"]
    with pytest.raises(sns.exceptions.NotFoundException):
        sns.publish(TopicArn=arn, Message="to nobody")
    with pytest.raises(sns.exceptions.NotFoundException):
        sns.get_topic_attributes(TopicArn=arn)


def test_fan_out_with_a_filter_policy_raw_and_in_the_envelope(
    sns: Any, sqs: Any, new_queue: Any
) -> None:
    topic = new_topic(sns)
    every, big = new_queue("-every"), new_queue("-big")
    wrapped = sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn(sqs, every))
    policy = {"amount": [{"numeric": [">=", 100]}]}
    raw = sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=queue_arn(sqs, big),
        Attributes={"FilterPolicy": json.dumps(policy), "RawMessageDelivery": "true"},
    )
    listed = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert sorted(s["SubscriptionArn"] for s in listed) == sorted(
        [wrapped["SubscriptionArn"], raw["SubscriptionArn"]]
    )
    assert all(s["Protocol"] == "sqs" and s["TopicArn"] == topic for s in listed)
    shown = sns.get_subscription_attributes(SubscriptionArn=raw["SubscriptionArn"])["Attributes"]
    assert json.loads(shown["FilterPolicy"]) == policy and shown["RawMessageDelivery"] == "true"

    small = sns.publish(
        TopicArn=topic,
        Message="small order",
        Subject="orders",
        MessageAttributes={"amount": {"DataType": "Number", "StringValue": "5"}},
    )
    large = sns.publish(TopicArn=topic, Message="large order", MessageAttributes=ORDER_ATTRIBUTES)

    envelopes = {
        json.loads(m["Body"])["Message"]: json.loads(m["Body"]) for m in drain(sqs, every, 2)
    }
    first = envelopes["small order"]
    assert first["Type"] == "Notification" and first["TopicArn"] == topic
    assert first["MessageId"] == small["MessageId"] and first["Subject"] == "orders"
    assert first["MessageAttributes"] == {"amount": {"Type": "Number", "Value": "5"}}
    assert first["Timestamp"].endswith("Z")
    assert envelopes["large order"]["MessageId"] == large["MessageId"]
    assert "Subject" not in envelopes["large order"]

    (only,) = drain(sqs, big, 1, attributes=True)  # the small order did not pass the filter
    assert only["Body"] == "large order"
    assert only["MessageAttributes"] == {"amount": {"StringValue": "250", "DataType": "Number"}}
    assert only["MD5OfBody"] == hashlib.md5(b"large order").hexdigest()


def test_subscriptions_change_and_go(sns: Any, sqs: Any, new_queue: Any) -> None:
    topic = new_topic(sns)
    url = new_queue()
    arn = sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn(sqs, url))[
        "SubscriptionArn"
    ]
    sns.set_subscription_attributes(
        SubscriptionArn=arn, AttributeName="RawMessageDelivery", AttributeValue="true"
    )
    sns.publish(TopicArn=topic, Message="bare")
    assert [m["Body"] for m in drain(sqs, url, 1)] == ["bare"]
    assert arn in [s["SubscriptionArn"] for s in sns.list_subscriptions()["Subscriptions"]]
    sns.unsubscribe(SubscriptionArn=arn)
    sns.publish(TopicArn=topic, Message="to nobody")
    drain(sqs, url, 0)
    with pytest.raises(sns.exceptions.NotFoundException):
        sns.get_subscription_attributes(SubscriptionArn=arn)


def test_bad_subscriptions_and_publishes_are_refused(sns: Any, sqs: Any, new_queue: Any) -> None:
    topic = new_topic(sns)
    endpoint = queue_arn(sqs, new_queue())
    refused: list[dict[str, Any]] = [
        {"Protocol": "http", "Endpoint": "http://example.invalid/"},
        {"Protocol": "sqs", "Endpoint": endpoint, "Attributes": {"FilterPolicy": "{not json"}},
        {"Protocol": "sqs", "Endpoint": endpoint, "Attributes": {"RawMessageDelivery": "yes"}},
        {"Protocol": "sqs", "Endpoint": endpoint, "Attributes": {"DeliveryPolicy": "{}"}},
    ]
    for call in refused:
        with pytest.raises(sns.exceptions.InvalidParameterException):
            sns.subscribe(TopicArn=topic, **call)
    assert sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"] == []
    with pytest.raises(sns.exceptions.InvalidParameterException):
        sns.publish(TopicArn=topic, Message="{}", MessageStructure="json")  # no "default"


def test_a_queue_subscribed_before_it_exists_gets_what_comes_after(
    sns: Any, sqs: Any, node: str
) -> None:
    topic = new_topic(sns)
    name = f"later-{uuid.uuid4().hex[:8]}"
    arn = f"arn:aws:sqs:us-east-1:000000000000:{name}"
    answer = sns.subscribe(
        TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"}
    )
    assert answer["SubscriptionArn"] == f"{topic}:{name}"  # accepted, as SNS does
    listed = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert [s["Endpoint"] for s in listed] == [arn]
    sns.publish(TopicArn=topic, Message="before the queue")  # nowhere to go: failed
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sns.publish(TopicArn=topic, Message="after")
    assert [m["Body"] for m in drain(sqs, url, 1)] == ["after"]
    with urllib.request.urlopen(f"{node}/metrics", timeout=10) as scraped:
        shown = scraped.read().decode()
    counted = f'dynamiq_topic_notifications_failed_total{{topic="{topic.rsplit(":", 1)[1]}"}} 1.0'
    assert counted in shown
    with pytest.raises(ClientError):  # not a name a queue can have
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn.replace(name, "push~x"))


def test_a_topic_s_subscriptions_list_a_page_at_a_time_each_once(sns: Any) -> None:
    topic = new_topic(sns)
    names = [f"paged-{uuid.uuid4().hex[:6]}-{i:03d}" for i in range(230)]
    for name in names:  # queues to come: SNS takes the subscriptions now
        arn = f"arn:aws:sqs:us-east-1:000000000000:{name}"
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
    pages = list(sns.get_paginator("list_subscriptions_by_topic").paginate(TopicArn=topic))
    assert [len(page["Subscriptions"]) for page in pages] == [100, 100, 30]
    listed = [s["SubscriptionArn"] for page in pages for s in page["Subscriptions"]]
    assert sorted(listed) == sorted(f"{topic}:{name}" for name in names)  # each once


def test_publish_batch_answers_per_entry(sns: Any, sqs: Any, new_queue: Any) -> None:
    topic = new_topic(sns)
    url = new_queue()
    sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=queue_arn(sqs, url),
        Attributes={"RawMessageDelivery": "true"},
    )
    answer = sns.publish_batch(
        TopicArn=topic,
        PublishBatchRequestEntries=[
            {"Id": "one", "Message": "first"},
            {"Id": "empty", "Message": ""},
            {"Id": "two", "Message": json.dumps({"default": "second"}), "MessageStructure": "json"},
        ],
    )
    assert [e["Id"] for e in answer["Successful"]] == ["one", "two"]
    (failed,) = answer["Failed"]
    assert failed["Id"] == "empty" and failed["SenderFault"]
    assert sorted(m["Body"] for m in drain(sqs, url, 2)) == ["first", "second"]
    with pytest.raises(sns.exceptions.BatchEntryIdsNotDistinctException):
        sns.publish_batch(
            TopicArn=topic,
            PublishBatchRequestEntries=[{"Id": "a", "Message": "x"}, {"Id": "a", "Message": "y"}],
        )
    with pytest.raises(sns.exceptions.TooManyEntriesInBatchRequestException):
        sns.publish_batch(
            TopicArn=topic,
            PublishBatchRequestEntries=[{"Id": f"m{i}", "Message": "x"} for i in range(11)],
        )
    drain(sqs, url, 0)  # a refused batch stored nothing


def fifo_into_queue(sns: Any, sqs: Any, new_queue: Any, **attributes: str) -> tuple[str, str]:
    """A FIFO topic with ``attributes`` and a FIFO queue subscribed raw to it."""
    topic = new_topic(sns, ".fifo", FifoTopic="true", **attributes)
    url = new_queue(".fifo", FifoQueue="true")
    sns.subscribe(
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=queue_arn(sqs, url),
        Attributes={"RawMessageDelivery": "true"},
    )
    return topic, url


def test_a_fifo_topic_keeps_groups_in_order_into_a_fifo_queue(
    sns: Any, sqs: Any, new_queue: Any
) -> None:
    topic, url = fifo_into_queue(sns, sqs, new_queue)
    for i in range(4):
        sns.publish(
            TopicArn=topic, Message=f"a{i}", MessageGroupId="a", MessageDeduplicationId=f"a{i}"
        )
    sns.publish(TopicArn=topic, Message="a0 again", MessageGroupId="a", MessageDeduplicationId="a0")
    with pytest.raises(ClientError) as refused:
        sns.publish(TopicArn=topic, Message="no group")
    assert code_of(refused) == "InvalidParameter"
    assert [m["Body"] for m in drain(sqs, url, 4)] == ["a0", "a1", "a2", "a3"]


def _raw_and_wrapped(sns: Any, sqs: Any, new_queue: Any) -> tuple[str, str, str]:
    """A topic and two queues subscribed to it: one raw, one in SNS's envelope."""
    topic = new_topic(sns)
    raw, wrapped = new_queue(), new_queue()
    for url, attributes in ((raw, {"RawMessageDelivery": "true"}), (wrapped, {})):
        sns.subscribe(
            TopicArn=topic, Protocol="sqs", Endpoint=queue_arn(sqs, url), Attributes=attributes
        )
    return topic, raw, wrapped


def test_a_message_of_sns_s_largest_size_fans_out_raw_and_in_the_envelope(
    sns: Any, sqs: Any, new_queue: Any
) -> None:
    topic, raw, wrapped = _raw_and_wrapped(sns, sqs, new_queue)
    body = "m" * (256 << 10)  # SNS's limit (its queues take up to 1 MiB from SQS)
    sent = sns.publish(TopicArn=topic, Message=body)
    (got,) = drain(sqs, raw, 1)
    assert got["Body"] == body and got["MD5OfBody"] == hashlib.md5(body.encode()).hexdigest()
    (envelope,) = drain(sqs, wrapped, 1)
    notice = json.loads(envelope["Body"])
    assert notice["Message"] == body and notice["MessageId"] == sent["MessageId"]


def test_custom_attribute_types_fan_out_as_they_were_published(
    sns: Any, sqs: Any, new_queue: Any
) -> None:
    from tests.sqs.test_sqs import VECTOR_ATTRIBUTES, VECTOR_MD5

    topic, raw, wrapped = _raw_and_wrapped(sns, sqs, new_queue)
    sns.publish(TopicArn=topic, Message="typed", MessageAttributes=VECTOR_ATTRIBUTES)
    (got,) = drain(sqs, raw, 1, attributes=True)
    assert got["MessageAttributes"] == VECTOR_ATTRIBUTES
    assert got["MD5OfMessageAttributes"] == VECTOR_MD5
    (envelope,) = drain(sqs, wrapped, 1)
    shown = json.loads(envelope["Body"])["MessageAttributes"]
    assert {name: a["Type"] for name, a in shown.items()} == {
        "attribName1": "String",
        "customNumberTypeAttrib": "Number.float",
        "binaryAttribute": "Binary",
    }
    assert shown["customNumberTypeAttrib"]["Value"] == "4563442423554324324264524243.32543234"
