"""SNS FIFO message archiving and replay through boto3: a topic's ``ArchivePolicy`` keeps
what is published to it, a subscription's ``ReplayPolicy`` delivers a range of it again,
marked ``Replayed``, each message once and in its group's order."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.servers import require_module
from tests.sqs.conftest import queue_arn
from tests.waiting import within

require_module("boto3", "test")

from botocore.exceptions import ClientError  # noqa: E402

NewQueue = Callable[..., str]
DAY = json.dumps({"MessageRetentionPeriod": "1"})


def archived_topic(sns: Any, policy: str = DAY) -> str:
    name = f"archived-{uuid.uuid4().hex[:8]}.fifo"
    attributes = {"FifoTopic": "true", "ArchivePolicy": policy}
    return str(sns.create_topic(Name=name, Attributes=attributes)["TopicArn"])


def publish(sns: Any, topic: str, count: int, groups: int = 3, tag: str = "m") -> list[str]:
    """Publish ``count`` messages over ``groups`` groups; their SNS message ids."""
    ids = []
    for i in range(count):
        answer = sns.publish(
            TopicArn=topic,
            Message=f"{tag}{i}",
            MessageGroupId=f"g{i % groups}",
            MessageDeduplicationId=f"{tag}-{i}",
            MessageAttributes={"n": {"DataType": "Number", "StringValue": str(i)}},
        )
        ids.append(answer["MessageId"])
    return ids


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def replay_policy(start: datetime, end: datetime | None = None) -> str:
    policy = {"PointType": "Timestamp", "StartingPoint": iso(start)}
    if end is not None:
        policy["EndingPoint"] = iso(end)
    return json.dumps(policy)


def a_moment_apart() -> datetime:
    """A moment no publish just before or just after shares: the clock is past it
    before it is told, and again by as much after."""
    started = datetime.now(UTC)
    apart = timedelta(milliseconds=20)
    within(lambda: datetime.now(UTC) > started + apart, 5.0, 0.005)
    moment = datetime.now(UTC)
    within(lambda: datetime.now(UTC) > moment + apart, 5.0, 0.005)
    return moment


def last_hour() -> str:
    return replay_policy(datetime.now(UTC) - timedelta(hours=1))


def drain(sqs: Any, url: str) -> list[dict[str, Any]]:
    """Every message the queue holds, received in order and deleted."""
    got: list[dict[str, Any]] = []
    while True:
        answer = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        messages = answer.get("Messages", [])
        if not messages:
            return got
        got += messages
        entries = [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
        ]
        sqs.delete_message_batch(QueueUrl=url, Entries=entries)


def replay_status(sns: Any, subscription: str) -> str:
    attributes = sns.get_subscription_attributes(SubscriptionArn=subscription)["Attributes"]
    return str(attributes["ReplayStatus"])


def subscribe(sns: Any, sqs: Any, topic: str, url: str, **attributes: str) -> str:
    return str(
        sns.subscribe(
            TopicArn=topic, Protocol="sqs", Endpoint=queue_arn(sqs, url), Attributes=attributes
        )["SubscriptionArn"]
    )


def refused(call: Callable[..., Any], **params: Any) -> str:
    with pytest.raises(ClientError) as raised:
        call(**params)
    error = raised.value.response["Error"]
    assert error["Code"] == "InvalidParameter"
    return str(error["Message"])


# -- the archive ---------------------------------------------------------------


def test_a_fifo_topic_keeps_its_archive_policy_and_tells_where_its_archive_begins(
    sns: Any,
) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    topic = archived_topic(sns)
    attributes = sns.get_topic_attributes(TopicArn=topic)["Attributes"]
    assert json.loads(attributes["ArchivePolicy"]) == {"MessageRetentionPeriod": "1"}
    beginning = datetime.fromisoformat(attributes["BeginningArchiveTime"])
    assert before <= beginning <= datetime.now(UTC)
    sns.set_topic_attributes(
        TopicArn=topic,
        AttributeName="ArchivePolicy",
        AttributeValue=json.dumps({"MessageRetentionPeriod": "30"}),
    )
    attributes = sns.get_topic_attributes(TopicArn=topic)["Attributes"]
    assert json.loads(attributes["ArchivePolicy"]) == {"MessageRetentionPeriod": "30"}
    # An empty policy stops archiving, and what was kept goes.
    sns.set_topic_attributes(TopicArn=topic, AttributeName="ArchivePolicy", AttributeValue="{}")
    attributes = sns.get_topic_attributes(TopicArn=topic)["Attributes"]
    assert "ArchivePolicy" not in attributes
    assert "BeginningArchiveTime" not in attributes


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        ("[]", "must be a JSON object"),
        ('{"MessageRetentionPeriod": "0"}', "a number of days from 1 to 365"),
        ('{"MessageRetentionPeriod": "366"}', "a number of days from 1 to 365"),
        ('{"MessageRetentionPeriod": "ten"}', "a number of days from 1 to 365"),
        ('{"MessageRetentionPeriod": "1", "Other": "2"}', "MessageRetentionPeriod is its only"),
    ],
    ids=["not-object", "zero", "past-a-year", "not-number", "unknown-key"],
)
def test_a_malformed_archive_policy_is_refused_and_changes_nothing(
    sns: Any, policy: str, reason: str
) -> None:
    topic = archived_topic(sns)
    said = refused(
        sns.set_topic_attributes,
        TopicArn=topic,
        AttributeName="ArchivePolicy",
        AttributeValue=policy,
    )
    assert said.startswith("Invalid parameter: ArchivePolicy Reason: ") and reason in said
    kept = sns.get_topic_attributes(TopicArn=topic)["Attributes"]["ArchivePolicy"]
    assert json.loads(kept) == {"MessageRetentionPeriod": "1"}


def test_a_standard_topic_keeps_no_archive(sns: Any) -> None:
    topic = sns.create_topic(Name=f"standard-{uuid.uuid4().hex[:8]}")["TopicArn"]
    said = refused(
        sns.set_topic_attributes, TopicArn=topic, AttributeName="ArchivePolicy", AttributeValue=DAY
    )
    assert said == "Invalid parameter: AttributeName"


def test_the_archive_is_no_queue_or_subscription_a_client_sees(
    sns: Any, sqs: Any, new_queue: NewQueue
) -> None:
    topic = archived_topic(sns)
    publish(sns, topic, 2)
    listed = sqs.list_queues(QueueNamePrefix="archive").get("QueueUrls", [])
    assert listed == []
    assert all("~" not in url for url in sqs.list_queues().get("QueueUrls", []))
    assert sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"] == []
    attributes = sns.get_topic_attributes(TopicArn=topic)["Attributes"]
    assert attributes["SubscriptionsConfirmed"] == "0"
    url = new_queue(".fifo", FifoQueue="true")
    subscribe(sns, sqs, topic, url)
    (only,) = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    assert only["Endpoint"] == queue_arn(sqs, url)


# -- replays -------------------------------------------------------------------


def test_a_replay_of_the_last_hour_delivers_each_message_once_in_order_marked_replayed(
    sns: Any, sqs: Any, new_queue: NewQueue
) -> None:
    topic = archived_topic(sns)
    live = new_queue(".fifo", FifoQueue="true")
    subscribe(sns, sqs, topic, live)
    ids = publish(sns, topic, 30)
    originals = {
        json.loads(m["Body"])["MessageId"]: json.loads(m["Body"]) for m in drain(sqs, live)
    }
    assert set(originals) == set(ids)

    url = new_queue(".fifo", FifoQueue="true")
    subscription = subscribe(sns, sqs, topic, url, ReplayPolicy=last_hour())
    within(lambda: replay_status(sns, subscription) == "Completed", 30.0, 0.1)
    replayed = drain(sqs, url)
    documents = [json.loads(m["Body"]) for m in replayed]
    assert sorted(d["MessageId"] for d in documents) == sorted(ids)  # each once
    for document in documents:
        assert document["Replayed"] is True
        original = originals[document["MessageId"]]
        # The same notification as delivered live: id, time, message, attributes.
        assert {k: v for k, v in document.items() if k != "Replayed"} == original
    for group in ("g0", "g1", "g2"):
        sent = [f"m{i}" for i in range(30) if f"g{i % 3}" == group]
        got = [
            d["Message"]
            for d, m in zip(documents, replayed, strict=True)
            if m["Attributes"]["MessageGroupId"] == group
        ]
        assert got == sent
    attributes = sns.get_subscription_attributes(SubscriptionArn=subscription)["Attributes"]
    assert json.loads(attributes["ReplayPolicy"])["PointType"] == "Timestamp"


def test_a_replay_delivers_only_its_time_range(sns: Any, sqs: Any, new_queue: NewQueue) -> None:
    topic = archived_topic(sns)
    publish(sns, topic, 5, tag="before")
    start = a_moment_apart()
    publish(sns, topic, 5, tag="within")
    end = a_moment_apart()
    publish(sns, topic, 5, tag="after")
    url = new_queue(".fifo", FifoQueue="true")
    subscription = subscribe(sns, sqs, topic, url, ReplayPolicy=replay_policy(start, end))
    within(lambda: replay_status(sns, subscription) == "Completed", 30.0, 0.1)
    got = sorted(json.loads(m["Body"])["Message"] for m in drain(sqs, url))
    assert got == sorted(f"within{i}" for i in range(5))


def test_a_raw_replay_through_a_filter_gives_the_bodies_and_attributes_it_takes(
    sns: Any, sqs: Any, new_queue: NewQueue
) -> None:
    topic = archived_topic(sns)
    publish(sns, topic, 10)
    url = new_queue(".fifo", FifoQueue="true")
    subscription = subscribe(
        sns,
        sqs,
        topic,
        url,
        RawMessageDelivery="true",
        FilterPolicy=json.dumps({"n": [{"numeric": [">=", 6]}]}),
        ReplayPolicy=last_hour(),
    )
    within(lambda: replay_status(sns, subscription) == "Completed", 30.0, 0.1)
    got = drain(sqs, url)
    assert sorted(m["Body"] for m in got) == [f"m{i}" for i in range(6, 10)]
    for message in got:
        value = message["MessageAttributes"]["n"]
        assert value["DataType"] == "Number"
        assert message["Body"] == f"m{value['StringValue']}"


def test_a_new_replay_delivers_again_and_new_messages_still_arrive_live(
    sns: Any, sqs: Any, new_queue: NewQueue
) -> None:
    topic = archived_topic(sns)
    publish(sns, topic, 4, groups=1)
    url = new_queue(".fifo", FifoQueue="true")
    subscription = subscribe(sns, sqs, topic, url, ReplayPolicy=last_hour())
    within(lambda: replay_status(sns, subscription) == "Completed", 30.0, 0.1)
    assert len(drain(sqs, url)) == 4
    sns.set_subscription_attributes(
        SubscriptionArn=subscription, AttributeName="ReplayPolicy", AttributeValue=last_hour()
    )
    within(lambda: replay_status(sns, subscription) == "Completed", 30.0, 0.1)
    again = [json.loads(m["Body"]) for m in drain(sqs, url)]
    assert [d["Message"] for d in again] == [f"m{i}" for i in range(4)]
    publish(sns, topic, 1, tag="live")
    (fresh,) = [json.loads(m["Body"]) for m in drain(sqs, url)]
    assert fresh["Message"] == "live0" and "Replayed" not in fresh


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        ("not json", "must be a JSON object"),
        ('{"PointType": "Sequence", "StartingPoint": "2026-01-01T00:00:00Z"}', "PointType"),
        ('{"PointType": "Timestamp"}', "StartingPoint is required"),
        ('{"PointType": "Timestamp", "StartingPoint": "yesterday"}', "ISO 8601"),
        (
            '{"PointType": "Timestamp", "StartingPoint": "2026-01-02T00:00:00Z", '
            '"EndingPoint": "2026-01-01T00:00:00Z"}',
            "EndingPoint must not be before StartingPoint",
        ),
        ('{"PointType": "Timestamp", "StartingPoint": "2999-01-01T00:00:00Z"}', "future"),
    ],
    ids=["not-json", "point-type", "no-start", "not-a-time", "end-before-start", "future"],
)
def test_a_malformed_replay_policy_is_refused_and_makes_no_subscription(
    sns: Any, sqs: Any, new_queue: NewQueue, policy: str, reason: str
) -> None:
    topic = archived_topic(sns)
    url = new_queue(".fifo", FifoQueue="true")
    said = refused(
        sns.subscribe,
        TopicArn=topic,
        Protocol="sqs",
        Endpoint=queue_arn(sqs, url),
        Attributes={"ReplayPolicy": policy},
    )
    assert said.startswith("Invalid parameter: ReplayPolicy Reason: ") and reason in said
    assert sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"] == []


def test_a_topic_without_an_archive_replays_nothing(
    sns: Any, sqs: Any, new_queue: NewQueue
) -> None:
    name = f"plain-{uuid.uuid4().hex[:8]}.fifo"
    topic = sns.create_topic(Name=name, Attributes={"FifoTopic": "true"})["TopicArn"]
    url = new_queue(".fifo", FifoQueue="true")
    subscription = subscribe(sns, sqs, topic, url)
    said = refused(
        sns.set_subscription_attributes,
        SubscriptionArn=subscription,
        AttributeName="ReplayPolicy",
        AttributeValue=last_hour(),
    )
    assert (
        said == "Invalid parameter: ReplayPolicy Reason: the topic keeps no archive (ArchivePolicy)"
    )
    attributes = sns.get_subscription_attributes(SubscriptionArn=subscription)["Attributes"]
    assert "ReplayStatus" not in attributes
