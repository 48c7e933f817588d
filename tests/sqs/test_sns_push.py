"""SNS push subscriptions through boto3, to a real HTTP endpoint: confirmation through
``SubscribeURL``, signed notifications checked independently with the certificate
at ``SigningCertURL``, raw delivery, retries under the delivery policy, dead letters,
``UnsubscribeURL``, and the endpoint rules; on LMDB and on Redis Cluster."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature

from dynamiq.testing.endpoint import Delivery, Receiver
from tests.servers import require_module
from tests.sns_signatures import verify
from tests.sqs.conftest import queue_arn
from tests.sqs.test_sns import drain, new_topic

require_module("boto3", "test")

from botocore.exceptions import ClientError  # noqa: E402

FAST_RETRIES = {"healthyRetryPolicy": {"numRetries": 2, "minDelayTarget": 1, "maxDelayTarget": 1}}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver()
    yield started
    started.close()


def subscribe(sns: Any, topic: str, receiver: Receiver, **attributes: str) -> str:
    """Subscribe ``receiver``, confirm through the ``SubscribeURL`` it got; return the ARN."""
    answer = sns.subscribe(
        TopicArn=topic, Protocol="http", Endpoint=receiver.url, Attributes=attributes
    )
    assert answer["SubscriptionArn"] == "pending confirmation"
    before = len(receiver.of("SubscriptionConfirmation"))
    asked = receiver.wait_for("SubscriptionConfirmation", before + 1)[-1]
    document = asked.document()
    verify(document)
    with urllib.request.urlopen(document["SubscribeURL"], timeout=10) as confirmed:
        assert confirmed.status == 200
        arn = confirmed.read().decode().split("<SubscriptionArn>")[1].split("<")[0]
    assert arn.startswith(topic + ":")
    return str(arn)


def test_subscribe_confirm_and_receive_signed_notifications(sns: Any, receiver: Receiver) -> None:
    topic = new_topic(sns)
    answer = sns.subscribe(TopicArn=topic, Protocol="http", Endpoint=receiver.url)
    assert answer["SubscriptionArn"] == "pending confirmation"
    asked = receiver.wait_for("SubscriptionConfirmation")[0]
    document = asked.document()
    verify(document)
    assert document["TopicArn"] == topic and len(document["Token"]) >= 64
    assert document["Message"].startswith(f"You have chosen to subscribe to the topic {topic}.")
    assert asked.headers["x-amz-sns-topic-arn"] == topic
    assert asked.headers["x-amz-sns-message-id"] == document["MessageId"]
    assert asked.headers["content-type"] == "text/plain; charset=UTF-8"
    assert "x-amz-sns-subscription-arn" not in asked.headers

    # Unconfirmed: listed and counted as pending, and gets nothing.
    counts = sns.get_topic_attributes(TopicArn=topic)["Attributes"]
    assert (counts["SubscriptionsPending"], counts["SubscriptionsConfirmed"]) == ("1", "0")
    listed = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert [(s["SubscriptionArn"], s["Protocol"], s["Endpoint"]) for s in listed] == [
        ("PendingConfirmation", "http", receiver.url)
    ]
    sns.publish(TopicArn=topic, Message="before confirmation")

    with urllib.request.urlopen(document["SubscribeURL"], timeout=10) as confirmed:
        arn = confirmed.read().decode().split("<SubscriptionArn>")[1].split("<")[0]
    shown = sns.get_subscription_attributes(SubscriptionArn=arn)["Attributes"]
    assert shown["PendingConfirmation"] == "false" and shown["Protocol"] == "http"
    assert shown["Endpoint"] == receiver.url
    assert json.loads(shown["EffectiveDeliveryPolicy"])["healthyRetryPolicy"]["numRetries"] == 3
    # ConfirmSubscription with the same token: the same subscription, no change.
    again = sns.confirm_subscription(TopicArn=topic, Token=document["Token"])
    assert again["SubscriptionArn"] == arn

    message_id = sns.publish(
        TopicArn=topic,
        Message="hello",
        Subject="greeting",
        MessageAttributes={"kind": {"DataType": "String", "StringValue": "order"}},
    )["MessageId"]
    got = receiver.wait_for("Notification")
    assert len(got) == 1  # the message published before confirmation was not delivered
    notification = got[0].document()
    verify(notification)
    assert (notification["Message"], notification["Subject"]) == ("hello", "greeting")
    assert notification["MessageId"] == message_id and notification["TopicArn"] == topic
    assert notification["MessageAttributes"] == {"kind": {"Type": "String", "Value": "order"}}
    assert notification["SignatureVersion"] == "1"
    assert got[0].headers["x-amz-sns-subscription-arn"] == arn
    assert got[0].headers["user-agent"] == "Amazon Simple Notification Service Agent"

    forged = {**notification, "Message": "changed"}
    with pytest.raises(InvalidSignature):
        verify(forged)

    # UnsubscribeURL ends it: nothing more arrives.
    with urllib.request.urlopen(notification["UnsubscribeURL"], timeout=10) as ended:
        assert ended.status == 200
    assert sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"] == []
    sns.publish(TopicArn=topic, Message="after")
    time.sleep(1.0)
    assert len(receiver.of("Notification")) == 1


def test_signature_version_2_and_raw_delivery(sns: Any, receiver: Receiver) -> None:
    topic = new_topic(sns)
    sns.set_topic_attributes(TopicArn=topic, AttributeName="SignatureVersion", AttributeValue="2")
    subscribe(sns, topic, receiver)
    sns.publish(TopicArn=topic, Message="signed with sha256")
    document = receiver.wait_for("Notification")[0].document()
    assert document["SignatureVersion"] == "2"
    verify(document)

    raw_receiver = Receiver()
    try:
        arn = subscribe(sns, topic, raw_receiver, RawMessageDelivery="true")
        sns.publish(TopicArn=topic, Message='{"raw": true}')
        got = raw_receiver.wait_for("Notification")[0]
        assert got.body == b'{"raw": true}'
        assert got.headers["x-amz-sns-rawdelivery"] == "true"
        assert got.headers["x-amz-sns-subscription-arn"] == arn
    finally:
        raw_receiver.close()


def metrics(node: str) -> str:
    with urllib.request.urlopen(f"{node}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def test_retries_follow_the_policy_then_succeed(sns: Any, node: str) -> None:
    failures = {"left": 2}

    def answer(delivery: Delivery) -> int:
        if delivery.kind == "Notification" and failures["left"]:
            failures["left"] -= 1
            return 500
        return 200

    receiver = Receiver(answer)
    try:
        topic = new_topic(sns)
        arn = subscribe(sns, topic, receiver, DeliveryPolicy=json.dumps(FAST_RETRIES))
        sns.publish(TopicArn=topic, Message="eventually")
        got = receiver.wait_for("Notification", 3)
        ids = {d.document()["MessageId"] for d in got}
        assert len(ids) == 1  # one message, tried three times
        time.sleep(1.5)
        assert len(receiver.of("Notification")) == 3  # delivered: not tried again
        shown = metrics(node)
        name = topic.rsplit(":", 1)[1]
        assert f'dynamiq_topic_notifications_failed_total{{topic="{name}"}} 2.0' in shown
        assert f'dynamiq_topic_notifications_delivered_total{{topic="{name}"}} 1.0' in shown
        subscription = arn.rsplit(":", 1)[1]
        attempts = f'dynamiq_push_delivery_seconds_count{{subscription="{subscription}"}} 4.0'
        assert attempts in shown  # the confirmation and three notifications
    finally:
        receiver.close()


def test_a_redirect_is_not_followed_but_retried(sns: Any) -> None:
    answers = iter([301])
    receiver = Receiver(lambda d: next(answers, 200) if d.kind == "Notification" else 200)
    try:
        topic = new_topic(sns)
        subscribe(sns, topic, receiver, DeliveryPolicy=json.dumps(FAST_RETRIES))
        sns.publish(TopicArn=topic, Message="moved?")
        got = receiver.wait_for("Notification", 2)
        assert [d.path for d in got] == ["/hook", "/hook"]  # the same URL, tried again
    finally:
        receiver.close()


@pytest.mark.parametrize("status", [503, 404])
def test_a_message_that_cannot_be_delivered_goes_to_the_dead_letter_queue(
    sns: Any, sqs: Any, new_queue: Callable[..., str], status: int
) -> None:
    receiver = Receiver(lambda d: status if d.kind == "Notification" else 200)
    try:
        topic = new_topic(sns)
        dlq = new_queue()
        redrive = json.dumps({"deadLetterTargetArn": queue_arn(sqs, dlq)})
        arn = subscribe(
            sns, topic, receiver, DeliveryPolicy=json.dumps(FAST_RETRIES), RedrivePolicy=redrive
        )
        assert json.loads(
            sns.get_subscription_attributes(SubscriptionArn=arn)["Attributes"]["RedrivePolicy"]
        ) == json.loads(redrive)
        sns.publish(TopicArn=topic, Message="undeliverable")
        # 5xx: the first attempt and both retries; 404: refused for good at once.
        attempts = 3 if status >= 500 else 1
        receiver.wait_for("Notification", attempts)
        [dead] = drain(sqs, dlq, 1)  # moved once the last attempt failed
        assert json.loads(dead["Body"])["Message"] == "undeliverable"
        assert len(receiver.of("Notification")) == attempts
    finally:
        receiver.close()


def test_subscribing_an_endpoint_the_rules_refuse(sns: Any, node: str) -> None:
    topic = new_topic(sns)
    for url, why in [
        (f"{node}/v2/queues", "own ports"),  # the node's own routes, as the node
        ("http://169.254.169.254/latest/meta-data", "deny"),
        ("ftp://example.com/x", "http or https"),
        ("http://user:secret@127.0.0.1:9/x", "user name"),
    ]:
        with pytest.raises(ClientError) as caught:
            sns.subscribe(TopicArn=topic, Protocol="http", Endpoint=url)
        error = caught.value.response["Error"]
        assert error["Code"] == "InvalidParameter" and why in error["Message"], error
    assert sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"] == []
    fifo = new_topic(sns, ".fifo", FifoTopic="true", ContentBasedDeduplication="true")
    with pytest.raises(ClientError):
        sns.subscribe(TopicArn=fifo, Protocol="https", Endpoint="https://127.0.0.1:9/x")


def test_the_same_endpoint_twice_is_one_subscription(sns: Any, receiver: Receiver) -> None:
    topic = new_topic(sns)
    first = subscribe(sns, topic, receiver)
    again = sns.subscribe(
        TopicArn=topic, Protocol="http", Endpoint=receiver.url, ReturnSubscriptionArn=True
    )
    assert again["SubscriptionArn"] == first
    assert len(sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]) == 1
    with pytest.raises(ClientError) as caught:
        sns.confirm_subscription(TopicArn=topic, Token="0" * 64)
    assert caught.value.response["Error"]["Message"] == "Invalid parameter: Token"
