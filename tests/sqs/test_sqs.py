"""The SQS endpoint through boto3, on a live node of each store: what SQS users rely on."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tests.servers import require_module
from tests.sqs.conftest import counts
from tests.waiting import until

require_module("boto3", "test")

from botocore.exceptions import ClientError  # noqa: E402

NewQueue = Callable[..., str]
# AWS's documented vectors for MD5OfMessageAttributes (all three together).
VECTOR_ATTRIBUTES = {
    "attribName1": {"DataType": "String", "StringValue": "attribValue 1"},
    "customNumberTypeAttrib": {
        "DataType": "Number.float",
        "StringValue": "4563442423554324324264524243.32543234",
    },
    "binaryAttribute": {"DataType": "Binary", "BinaryValue": b"Hello binary world!"},
}
VECTOR_MD5 = "c932db14a896c663f83c260297d594ff"


def error_of(exc: pytest.ExceptionInfo[ClientError]) -> tuple[str, str]:
    error = exc.value.response["Error"]
    return error["Code"], error.get("QueryErrorCode", "")


def md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


# -- queues ----------------------------------------------------------------------------


def test_a_queue_from_creation_to_deletion(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue(VisibilityTimeout="45", DelaySeconds="2", MessageRetentionPeriod="3600")
    name = url.rsplit("/", 1)[1]
    assert url.endswith(f"/000000000000/{name}")
    assert sqs.get_queue_url(QueueName=name)["QueueUrl"] == url
    # Created again alike: the same URL; otherwise refused
    assert (
        sqs.create_queue(
            QueueName=name,
            Attributes={
                "VisibilityTimeout": "45",
                "DelaySeconds": "2",
                "MessageRetentionPeriod": "3600",
            },
        )["QueueUrl"]
        == url
    )
    with pytest.raises(sqs.exceptions.QueueNameExists) as exists:
        sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "46"})
    assert error_of(exists) == ("QueueAlreadyExists", "QueueNameExists")

    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["QueueArn"] == f"arn:aws:sqs:us-east-1:000000000000:{name}"
    assert attributes["VisibilityTimeout"] == "45"
    assert attributes["DelaySeconds"] == "2"
    assert attributes["MessageRetentionPeriod"] == "3600"
    assert attributes["MaximumMessageSize"] == "1048576"
    assert attributes["ApproximateNumberOfMessages"] == "0"
    assert abs(int(attributes["CreatedTimestamp"]) - time.time()) < 60
    only = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["DelaySeconds"])["Attributes"]
    assert only == {"DelaySeconds": "2"}
    assert "Attributes" not in sqs.get_queue_attributes(QueueUrl=url)

    sqs.set_queue_attributes(
        QueueUrl=url, Attributes={"VisibilityTimeout": "5", "ReceiveMessageWaitTimeSeconds": "3"}
    )
    changed = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (changed["VisibilityTimeout"], changed["ReceiveMessageWaitTimeSeconds"]) == ("5", "3")
    assert int(changed["LastModifiedTimestamp"]) >= int(changed["CreatedTimestamp"])

    sqs.delete_queue(QueueUrl=url)
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as gone:
        sqs.get_queue_url(QueueName=name)
    assert error_of(gone) == ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")


def test_bad_queue_attributes_are_refused_and_change_nothing(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue()
    for attributes, code in (
        ({"NoSuchThing": "1"}, "InvalidAttributeName"),
        ({"VisibilityTimeout": "43201"}, "InvalidAttributeValue"),
        ({"DelaySeconds": "soon"}, "InvalidAttributeValue"),
        ({"RedrivePolicy": "{}x"}, "InvalidAttributeValue"),
        ({"FifoQueue": "true"}, "InvalidAttributeName"),
        ({"ContentBasedDeduplication": "true"}, "InvalidAttributeName"),
    ):
        with pytest.raises(ClientError) as refused:
            sqs.set_queue_attributes(QueueUrl=url, Attributes=attributes)
        assert error_of(refused)[0] == code, attributes
    with pytest.raises(ClientError) as refused:
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Nope"])
    assert error_of(refused)[0] == "InvalidAttributeName"
    with pytest.raises(ClientError) as refused:
        sqs.create_queue(QueueName="not.fifo-but-dotted")
    assert error_of(refused)[0] == "InvalidParameterValue"
    shown = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])
    assert shown["Attributes"] == {"VisibilityTimeout": "30"}  # as created


def test_list_queues_by_prefix_and_page(sqs: Any) -> None:
    prefix = f"page-{time.monotonic_ns()}-"
    urls = [sqs.create_queue(QueueName=f"{prefix}{i}")["QueueUrl"] for i in range(5)]
    assert sorted(sqs.list_queues(QueueNamePrefix=prefix)["QueueUrls"]) == sorted(urls)
    seen, token = [], None
    while True:
        page = sqs.list_queues(
            QueueNamePrefix=prefix, MaxResults=2, **({"NextToken": token} if token else {})
        )
        seen += page["QueueUrls"]
        token = page.get("NextToken")
        if token is None:
            break
    assert sorted(seen) == sorted(urls) and len(seen) == 5
    assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix="no-such-prefix-")


# -- messages ----------------------------------------------------------------------------


def test_send_receive_delete_with_attributes_and_digests(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue()
    sent = sqs.send_message(QueueUrl=url, MessageBody="hello", MessageAttributes=VECTOR_ATTRIBUTES)
    assert sent["MD5OfMessageBody"] == "5d41402abc4b2a76b9719d911017c592"
    assert sent["MD5OfMessageAttributes"] == VECTOR_MD5
    plain = sqs.send_message(QueueUrl=url, MessageBody="plain")
    assert "MD5OfMessageAttributes" not in plain

    attributes = {
        "kind": {"DataType": "String", "StringValue": "order"},
        "amount": {"DataType": "Number", "StringValue": "12"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\x02"},
    }
    typed = sqs.send_message(QueueUrl=url, MessageBody="typed", MessageAttributes=attributes)
    got = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
    )["Messages"]
    by_body = {m["Body"]: m for m in got}
    assert set(by_body) == {"hello", "plain", "typed"}
    for m in got:
        assert m["MD5OfBody"] == md5(m["Body"])
        assert m["Attributes"]["ApproximateReceiveCount"] == "1"
        assert abs(int(m["Attributes"]["SentTimestamp"]) / 1000 - time.time()) < 60
    # What was sent comes back as it was sent, and so does its digest; a custom type
    # and a number written its own way are kept (AWS's vector)
    assert by_body["hello"]["MessageAttributes"] == VECTOR_ATTRIBUTES
    assert by_body["hello"]["MD5OfMessageAttributes"] == VECTOR_MD5
    assert by_body["typed"]["MessageAttributes"] == attributes
    assert by_body["typed"]["MD5OfMessageAttributes"] == typed["MD5OfMessageAttributes"]
    assert "MessageAttributes" not in by_body["plain"]

    for m in got:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    assert counts(sqs, url) == ("0", "0")


def test_only_the_message_attributes_asked_for_come_back(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue()
    sqs.send_message(
        QueueUrl=url,
        MessageBody="x",
        MessageAttributes={
            "app.kind": {"DataType": "String", "StringValue": "a"},
            "app.size": {"DataType": "Number", "StringValue": "3"},
            "other": {"DataType": "String", "StringValue": "b"},
        },
    )
    (m,) = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["app.*"])["Messages"]
    assert set(m["MessageAttributes"]) == {"app.kind", "app.size"}
    subset = dict(m["MessageAttributes"])
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
    )
    (again,) = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["other"])["Messages"]
    assert set(again["MessageAttributes"]) == {"other"}
    assert again["MD5OfMessageAttributes"] != m["MD5OfMessageAttributes"]
    assert subset["app.size"] == {"DataType": "Number", "StringValue": "3"}


def test_bad_messages_are_refused(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue()
    for kwargs, code in (
        ({"MessageBody": "bad \x01 character"}, "InvalidMessageContents"),
        ({"MessageBody": "x" * ((1 << 20) + 1)}, "InvalidParameterValue"),
        ({"MessageBody": "x", "DelaySeconds": 901}, "InvalidParameterValue"),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {"AWS.x": {"DataType": "String", "StringValue": "v"}},
            },
            "InvalidParameterValue",
        ),
        (
            {
                "MessageBody": "x",
                "MessageAttributes": {"n": {"DataType": "Number", "StringValue": "ten"}},
            },
            "InvalidParameterValue",
        ),
    ):
        with pytest.raises(ClientError) as refused:
            sqs.send_message(QueueUrl=url, **kwargs)
        assert error_of(refused)[0] == code, kwargs
    assert "Messages" not in sqs.receive_message(QueueUrl=url)


def test_batches_answer_per_entry_and_refuse_whole_requests(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue()
    answer = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "MessageBody": "one"},
            {"Id": "b", "MessageBody": "bad \x02"},
            {"Id": "c", "MessageBody": "three", "DelaySeconds": 0},
        ],
    )
    assert [s["Id"] for s in answer["Successful"]] == ["a", "c"]
    assert answer["Successful"][0]["MD5OfMessageBody"] == md5("one")
    (failure,) = answer["Failed"]
    assert (failure["Id"], failure["Code"], failure["SenderFault"]) == (
        "b",
        "InvalidMessageContents",
        True,
    )
    for entries, code in (
        ([], "AWS.SimpleQueueService.EmptyBatchRequest"),
        (
            [{"Id": str(i), "MessageBody": "x"} for i in range(11)],
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        ),
        (
            [{"Id": "same", "MessageBody": "x"}] * 2,
            "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
        ),
        ([{"Id": "no spaces", "MessageBody": "x"}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
    ):
        with pytest.raises(ClientError) as refused:
            sqs.send_message_batch(QueueUrl=url, Entries=entries)
        assert error_of(refused)[0] == code

    # The batch limit counts bytes: 800 characters of two bytes each are too many for
    # a queue of 1 KiB messages, though each message fits
    small = new_queue(MaximumMessageSize="1024")
    wide = [{"Id": str(i), "MessageBody": "é" * 400} for i in range(2)]
    with pytest.raises(ClientError) as refused:
        sqs.send_message_batch(QueueUrl=small, Entries=wide)
    assert error_of(refused)[0] == "AWS.SimpleQueueService.BatchRequestTooLong"
    assert len(sqs.send_message_batch(QueueUrl=small, Entries=wide[:1])["Successful"]) == 1

    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30)[
        "Messages"
    ]
    assert sorted(m["Body"] for m in got) == ["one", "three"]
    entries = [{"Id": f"m{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
    entries.append({"Id": "junk", "ReceiptHandle": "not-a-handle"})
    changed = sqs.change_message_visibility_batch(
        QueueUrl=url, Entries=[{**e, "VisibilityTimeout": 60} for e in entries]
    )
    assert sorted(s["Id"] for s in changed["Successful"]) == ["m0", "m1"]
    assert [(f["Id"], f["Code"]) for f in changed["Failed"]] == [("junk", "ReceiptHandleIsInvalid")]
    deleted = sqs.delete_message_batch(QueueUrl=url, Entries=entries)
    assert sorted(s["Id"] for s in deleted["Successful"]) == ["m0", "m1"]
    assert [f["Id"] for f in deleted["Failed"]] == ["junk"]
    assert counts(sqs, url) == ("0", "0")


def test_a_handle_from_an_earlier_receive_deletes_nothing_but_moves_the_lease(
    sqs: Any, new_queue: NewQueue
) -> None:
    url = new_queue()
    sqs.send_message(QueueUrl=url, MessageBody="twice")
    (first,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=1)["Messages"]
    # Delivered again once its lease lapsed
    (second,) = until(
        lambda: sqs.receive_message(QueueUrl=url, VisibilityTimeout=30, WaitTimeSeconds=1).get(
            "Messages"
        ),
        what="the message again",
    )
    assert second["ReceiptHandle"] != first["ReceiptHandle"]
    # The stale handle: the delete succeeds and deletes nothing, as SQS documents
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    assert counts(sqs, url) == ("0", "1")
    # but a visibility change through it changes the current lease, as SQS does
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0
    )
    assert counts(sqs, url) == ("1", "0")
    sqs.delete_message(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"])
    assert counts(sqs, url) == ("0", "0")
    with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid):
        sqs.delete_message(QueueUrl=url, ReceiptHandle="AAAA" + second["ReceiptHandle"][4:])


def test_visibility_zero_makes_a_message_visible_again(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue()
    sqs.send_message(QueueUrl=url, MessageBody="again")
    (m,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=300)["Messages"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
    )
    (again,) = sqs.receive_message(
        QueueUrl=url, MessageSystemAttributeNames=["ApproximateReceiveCount"]
    )["Messages"]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"


def test_a_long_poll_returns_as_soon_as_a_message_arrives(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue()
    sender = threading.Timer(0.5, lambda: sqs.send_message(QueueUrl=url, MessageBody="late"))
    started = time.monotonic()
    sender.start()
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10)["Messages"]
    waited = time.monotonic() - started
    sender.join()
    assert [m["Body"] for m in got] == ["late"]
    assert waited < 8  # woken by the message, not by the end of the poll


def test_a_poisoned_message_goes_to_the_dead_letter_queue(sqs: Any, new_queue: NewQueue) -> None:
    dead = new_queue("-dead")
    dead_arn = sqs.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    policy = json.dumps({"deadLetterTargetArn": dead_arn, "maxReceiveCount": "2"})
    url = new_queue(RedrivePolicy=policy)
    source_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    shown = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"]
    assert json.loads(shown["RedrivePolicy"]) == {
        "deadLetterTargetArn": dead_arn,
        "maxReceiveCount": 2,
    }
    assert sqs.list_dead_letter_source_queues(QueueUrl=dead)["queueUrls"] == [url]

    sqs.send_message(QueueUrl=url, MessageBody="poison")
    for _ in range(2):  # received, and never deleted
        (m,) = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
        )
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)
    (moved,) = sqs.receive_message(QueueUrl=dead, WaitTimeSeconds=5, AttributeNames=["All"])[
        "Messages"
    ]
    assert moved["Body"] == "poison"
    assert moved["Attributes"]["DeadLetterQueueSourceArn"] == source_arn


def test_fifo_keeps_each_group_in_order_and_stores_a_repeat_once(
    sqs: Any, new_queue: NewQueue
) -> None:
    url = new_queue(".fifo", FifoQueue="true", ContentBasedDeduplication="true")
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attributes["FifoQueue"], attributes["ContentBasedDeduplication"]) == ("true", "true")
    entries = [
        {"Id": f"{g}{i}", "MessageBody": f"{g}-{i}", "MessageGroupId": g}
        for i in range(4)
        for g in ("a", "b")
    ]
    sent = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert not sent.get("Failed") and all("SequenceNumber" in s for s in sent["Successful"])
    repeat = sqs.send_message(QueueUrl=url, MessageBody="a-0", MessageGroupId="a")
    assert repeat["MessageId"] == sent["Successful"][0]["MessageId"]  # deduplicated by content
    with pytest.raises(ClientError) as refused:
        sqs.send_message(QueueUrl=url, MessageBody="no group")
    assert error_of(refused)[0] == "MissingParameter"

    seen: dict[str, list[str]] = {"a": [], "b": []}
    for _ in range(20):
        got = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
            AttributeNames=["MessageGroupId"],
        ).get("Messages", [])
        if not got and len(seen["a"]) + len(seen["b"]) == 8:
            break
        for m in got:
            seen[m["Attributes"]["MessageGroupId"]].append(m["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert seen == {g: [f"{g}-{i}" for i in range(4)] for g in ("a", "b")}


def test_purge_empties_the_queue(sqs: Any, new_queue: NewQueue) -> None:
    url = new_queue()
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(5)]
    )
    sqs.purge_queue(QueueUrl=url)
    assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)


def test_unknown_actions_and_queues_get_sqs_errors(sqs: Any) -> None:
    missing = sqs.meta.endpoint_url + "/000000000000/no-such-queue"
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.send_message(QueueUrl=missing, MessageBody="x")
    with pytest.raises(ClientError) as refused:
        sqs.receive_message(QueueUrl=missing, MaxNumberOfMessages=11)
    assert error_of(refused)[0] in (
        "InvalidParameterValue",
        "AWS.SimpleQueueService.NonExistentQueue",
    )


def test_any_node_of_a_cluster_serves_every_action(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from dynamiq.testing.cluster import LocalCluster
    from tests.sqs.conftest import sqs_client

    cluster = LocalCluster(tmp_path_factory.mktemp("sqs-cluster"), 3)
    cluster.start()
    clients = contextlib.ExitStack()
    try:
        n1, n2, n3 = (
            clients.enter_context(contextlib.closing(sqs_client(cluster.nodes[n].url)))
            for n in ("n1", "n2", "n3")
        )
        url = n1.create_queue(QueueName="everywhere")["QueueUrl"]
        for other in (n2, n3):  # the catalog reaches the others within a sync round
            until(functools.partial(_lists, other, "everywhere"), what="the queue on every node")
        for start in range(0, 30, 10):
            n2.send_message_batch(
                QueueUrl=url,
                Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(start, start + 10)],
            )
        got: list[dict[str, Any]] = []
        while len(got) < 30:  # through n3: its slice, then the others'
            batch = n3.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2)
            assert "Messages" in batch, f"only {len(got)} of 30 received"
            got += batch["Messages"]
        assert sorted(m["Body"] for m in got) == sorted(f"m{i}" for i in range(30))
        # Handles from n3's receives settle through n1 and n2
        first, rest = got[:10], got[10:]
        n1.change_message_visibility_batch(
            QueueUrl=url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                for i, m in enumerate(first)
            ],
        )
        again: list[dict[str, Any]] = []
        while len(again) < 10:
            batch = n2.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2)
            assert "Messages" in batch, f"only {len(again)} of 10 came again"
            again += batch["Messages"]
        # The first handles are stale now: deleting with them leaves the messages
        for m in first:
            n1.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        assert counts(n2, url)[1] == "30"
        for m in rest + again:
            n1.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        assert counts(n3, url) == ("0", "0")
        # SNS too: a topic made through n1 fans out what is published through n3.
        sns1, sns3 = (
            clients.enter_context(contextlib.closing(sqs_client(cluster.nodes[n].url, "sns")))
            for n in ("n1", "n3")
        )
        topic = sns1.create_topic(Name="fan")["TopicArn"]
        arn = n1.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
        sns1.subscribe(
            TopicArn=topic,
            Protocol="sqs",
            Endpoint=arn["QueueArn"],
            Attributes={"RawMessageDelivery": "true"},
        )
        until(lambda: _subscribed(sns3, topic), what="the subscription on n3")
        sns3.publish_batch(
            TopicArn=topic,
            PublishBatchRequestEntries=[{"Id": f"e{i}", "Message": f"e{i}"} for i in range(10)],
        )
        fanned: list[str] = []
        while len(fanned) < 10:
            batch = n2.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2)
            assert "Messages" in batch, f"only {len(fanned)} of 10 fanned out"
            fanned += [m["Body"] for m in batch["Messages"]]
        assert sorted(fanned) == sorted(f"e{i}" for i in range(10))
    finally:
        clients.close()
        cluster.stop()


def test_a_full_queue_throttles_sends_as_sdks_retry_them(
    sqs: Any, node: str, new_queue: NewQueue
) -> None:
    url = new_queue()
    name = url.rsplit("/", 1)[1]
    bound = urllib.request.Request(
        f"{node}/v2/queues/{name}",
        data=json.dumps({"max_depth": 1}).encode(),
        method="PATCH",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(bound) as answer:
        assert json.load(answer)["settings"]["max_depth"] == 1
    sqs.send_message(QueueUrl=url, MessageBody="fits")
    with pytest.raises(ClientError) as refused:  # after the SDK's own retry
        sqs.send_message(QueueUrl=url, MessageBody="does not")
    assert error_of(refused) == ("RequestThrottled", "RequestThrottled")
    assert refused.value.response["ResponseMetadata"]["HTTPHeaders"]["retry-after"] == "1"
    assert refused.value.response["ResponseMetadata"]["RetryAttempts"] > 0  # retryable to SDKs
    assert counts(sqs, url) == ("1", "0")


def _lists(sqs: Any, name: str) -> bool:
    """Whether ``sqs`` lists the queue ``name``."""
    return name in str(sqs.list_queues(QueueNamePrefix=name[:5]))


def _subscribed(sns: Any, topic: str) -> bool:
    try:
        return bool(sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"])
    except sns.exceptions.NotFoundException:
        return False  # the topic itself is not there yet
