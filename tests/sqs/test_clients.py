"""The endpoint through other clients than boto3: the AWS command line, aiobotocore,
the JavaScript SDK v3 (which checks every body's MD5), and an SDK of the query
protocol's generation (botocore 1.31's own SQS model: form in, XML out)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import require_module, require_path
from tests.sqs.conftest import run_js

require_module("boto3", "test")

import botocore.session  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
QUERY_MODELS = Path(sys.prefix) / "aws-models"
CREDENTIALS = {"aws_access_key_id": "key", "aws_secret_access_key": "secret"}


def test_the_javascript_sdk_checks_every_digest_and_finds_them_right(node: str) -> None:
    name = f"js-{uuid.uuid4().hex[:8]}"
    seen = run_js("roundtrip.mjs", node, name)
    assert seen["checked"]  # a client with a wrong MD5 fails: the SDK does check
    assert len(set(seen["sent"])) == 3
    assert seen["bodies"] == ["first ✓", "second", "third\r\nline"]
    assert seen["attributes"] == {
        "first ✓": ["blob", "count", "custom", "gif", "long", "price", "text"],
        "second": ["count"],
        "third\r\nline": [],
    }
    assert seen["receiveCounts"] == ["1", "1", "1"] and seen["deleted"] == 3
    # Custom types come back as sent, and every attribute digest is AWS's
    assert seen["types"]["first ✓"] == {
        "text": "String",
        "count": "Number",
        "blob": "Binary",
        "custom": "String.json",
        "long": "Number.java.lang.Long",
        "price": "Number",
        "gif": "Binary.gif",
    }
    assert seen["sentDigestRight"] and seen["sameDigest"]
    assert seen["receivedDigestsRight"] == [True, True]


def aws(node: str, *args: str) -> Any:
    """Run the AWS command line against ``node``; return its JSON output."""
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "key",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    command = [str(Path(sys.prefix) / "bin" / "aws"), "--endpoint-url", node, "--output", "json"]
    done = subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


def test_the_aws_command_line_drives_a_queue_and_a_topic(node: str) -> None:
    require_module("awscli", "test")
    name = f"cli-{uuid.uuid4().hex[:8]}"
    url = aws(node, "sqs", "create-queue", "--queue-name", name)["QueueUrl"]
    assert url == f"{node}/000000000000/{name}"
    arn = aws(node, "sqs", "get-queue-attributes", "--queue-url", url, "--attribute-names", "All")[
        "Attributes"
    ]["QueueArn"]
    topic = aws(node, "sns", "create-topic", "--name", f"{name}-t")["TopicArn"]
    aws(
        node,
        "sns",
        "subscribe",
        "--topic-arn",
        topic,
        "--protocol",
        "sqs",
        "--notification-endpoint",
        arn,
        "--attributes",
        "RawMessageDelivery=true",
    )
    sent = aws(node, "sqs", "send-message", "--queue-url", url, "--message-body", "direct")
    published = aws(node, "sns", "publish", "--topic-arn", topic, "--message", "fanned")
    assert sent["MD5OfMessageBody"] == hashlib.md5(b"direct").hexdigest()
    assert published["MessageId"]
    got = aws(
        node,
        "sqs",
        "receive-message",
        "--queue-url",
        url,
        "--max-number-of-messages",
        "10",
        "--wait-time-seconds",
        "2",
    )["Messages"]
    while len(got) < 2:
        more = aws(node, "sqs", "receive-message", "--queue-url", url, "--wait-time-seconds", "2")
        got += more["Messages"]
    assert sorted(m["Body"] for m in got) == ["direct", "fanned"]
    for m in got:
        aws(
            node,
            "sqs",
            "delete-message",
            "--queue-url",
            url,
            "--receipt-handle",
            m["ReceiptHandle"],
        )
    attributes = aws(
        node,
        "sqs",
        "get-queue-attributes",
        "--queue-url",
        url,
        "--attribute-names",
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
    )["Attributes"]
    assert attributes == {
        "ApproximateNumberOfMessages": "0",
        "ApproximateNumberOfMessagesNotVisible": "0",
    }
    aws(node, "sqs", "delete-queue", "--queue-url", url)
    assert name not in json.dumps(aws(node, "sqs", "list-queues") or {})


def test_aiobotocore_long_polls_while_another_task_sends(node: str) -> None:
    require_module("aiobotocore", "test")
    from aiobotocore.session import get_session

    async def scenario() -> list[str]:
        session = get_session()
        async with session.create_client(
            "sqs", endpoint_url=node, region_name="us-east-1", **CREDENTIALS
        ) as sqs:
            url = (await sqs.create_queue(QueueName=f"aio-{uuid.uuid4().hex[:8]}"))["QueueUrl"]
            waiting = asyncio.create_task(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20))
            await asyncio.sleep(0.5)
            assert not waiting.done()  # a long poll: nothing there yet
            await sqs.send_message(QueueUrl=url, MessageBody="awaited")
            # Answered when the message came, long before the end of its 20 s wait
            got = (await asyncio.wait_for(waiting, 10))["Messages"]
            await sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
            return [m["Body"] for m in got]

    assert asyncio.run(scenario()) == ["awaited"]


@pytest.fixture
def query_sqs(node: str) -> Iterator[Any]:
    """An SQS client of botocore 1.31's generation: the query protocol, XML answers."""
    require_path(QUERY_MODELS / "sqs", "setup.sh fetches botocore 1.31's SQS model")
    session = botocore.session.get_session()
    session.get_component("data_loader").search_paths.insert(0, str(QUERY_MODELS))
    client = session.create_client("sqs", endpoint_url=node, region_name="us-east-1", **CREDENTIALS)
    assert client.meta.service_model.protocol == "query"
    with contextlib.closing(client):
        yield client


def test_the_query_protocol_serves_every_queue_and_message_action(query_sqs: Any) -> None:
    sqs = query_sqs
    name = f"query-{uuid.uuid4().hex[:8]}"
    url = sqs.create_queue(
        QueueName=name, Attributes={"VisibilityTimeout": "7"}, tags={"team": "core"}
    )["QueueUrl"]
    assert sqs.get_queue_url(QueueName=name)["QueueUrl"] == url
    assert url in sqs.list_queues(QueueNamePrefix=name)["QueueUrls"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "7" and attributes["QueueArn"].endswith(name)
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "core"}
    body = "a\r\nb <&> é"  # escaped, and its carriage return kept
    typed = {
        "n": {"DataType": "Number", "StringValue": "3"},
        "b": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
    }
    one = sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=typed)
    batch = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[{"Id": "ok", "MessageBody": "x"}, {"Id": "empty", "MessageBody": ""}],
    )
    assert [e["Id"] for e in batch["Successful"]] == ["ok"]
    assert batch["Failed"][0]["Id"] == "empty" and batch["Failed"][0]["SenderFault"]
    got = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        WaitTimeSeconds=2,
        AttributeNames=["All"],
        MessageAttributeNames=["All"],
    )["Messages"]
    by_body = {m["Body"]: m for m in got}
    first = by_body[body]
    assert first["MessageId"] == one["MessageId"]
    assert first["MD5OfMessageAttributes"] == one["MD5OfMessageAttributes"]
    assert first["MessageAttributes"]["b"]["BinaryValue"] == b"\x00\x01\xff"
    assert first["Attributes"]["ApproximateReceiveCount"] == "1"
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0
    )
    deleted = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)],
    )
    # The handle of the message made visible again is stale once it is received again,
    # but here nobody received it since: both deletes succeed.
    assert len(deleted["Successful"]) == len(got) == 2
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName=f"{name}-missing")
    sqs.delete_queue(QueueUrl=url)


def test_the_query_protocol_is_answered_at_a_queue_s_own_url(query_sqs: Any) -> None:
    """Older SDKs post to the queue's URL and leave ``QueueUrl`` out of the form."""
    import urllib.parse
    import urllib.request

    sqs = query_sqs
    url = sqs.create_queue(QueueName=f"path-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    form = urllib.parse.urlencode({"Action": "SendMessage", "MessageBody": "posted"}).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=form), timeout=10) as answer:
        document = answer.read().decode()
    assert answer.headers["Content-Type"].startswith("text/xml")
    assert "<SendMessageResponse" in document and "<MD5OfMessageBody>" in document
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"]
    assert [m["Body"] for m in got] == ["posted"]


def test_the_query_protocol_words_its_errors_as_aws_recorded_them(query_sqs: Any) -> None:
    url = query_sqs.create_queue(QueueName=f"query-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    query_sqs.delete_queue(QueueUrl=url)
    with pytest.raises(ClientError) as gone:
        query_sqs.get_queue_attributes(QueueUrl=url)
    assert gone.value.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert gone.value.response["Error"]["Message"] == (
        "The specified queue does not exist for this wsdl version."
    )
