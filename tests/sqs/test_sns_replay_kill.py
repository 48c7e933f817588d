"""A replay outlives ``kill -9`` of the node replaying: restarted, it goes on from where
it was, and the subscription gets each archived message once, in its group's order."""

from __future__ import annotations

import json
import signal
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.conftest import NodeFactory
from tests.servers import require_module
from tests.sqs.conftest import queue_arn, sqs_client
from tests.sqs.test_sns_archive import DAY, drain, replay_policy, replay_status
from tests.waiting import within

require_module("boto3", "test")

MESSAGES = 300
GROUPS = 4
RATE = "60"  # messages a second: the replay takes about five seconds


def queued(sqs: Any, url: str) -> int:
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"])


def test_kill_9_while_replaying_delivers_each_message_once_in_order(
    node_factory: NodeFactory, process_store: tuple[str, ...]
) -> None:
    flags = ("--limits-replayrate", RATE, *process_store)
    node = node_factory(*flags).start()
    sns: Any = sqs_client(node.url, "sns")
    sqs: Any = sqs_client(node.url)
    try:
        name = f"kept-{uuid.uuid4().hex[:8]}.fifo"
        attributes = {"FifoTopic": "true", "ArchivePolicy": DAY}
        topic = sns.create_topic(Name=name, Attributes=attributes)["TopicArn"]
        ids: list[str] = []
        for start in range(0, MESSAGES, 10):
            entries = [
                {
                    "Id": str(i),
                    "Message": f"m{start + i}",
                    "MessageGroupId": f"g{(start + i) % GROUPS}",
                    "MessageDeduplicationId": f"d{start + i}",
                }
                for i in range(10)
            ]
            answer = sns.publish_batch(TopicArn=topic, PublishBatchRequestEntries=entries)
            ids += [e["MessageId"] for e in answer["Successful"]]
        assert len(ids) == MESSAGES
        url = sqs.create_queue(
            QueueName=f"r-{uuid.uuid4().hex[:8]}.fifo", Attributes={"FifoQueue": "true"}
        )["QueueUrl"]
        policy = replay_policy(datetime.now(UTC) - timedelta(hours=1))
        subscription = sns.subscribe(
            TopicArn=topic,
            Protocol="sqs",
            Endpoint=queue_arn(sqs, url),
            Attributes={"ReplayPolicy": policy},
        )["SubscriptionArn"]
        within(lambda: queued(sqs, url) >= 50, 30.0, 0.05)
        node.signal(signal.SIGKILL)
        node.wait()
        sns.close()
        sqs.close()

        node = node_factory(*flags, data=node.data).start()
        sns = sqs_client(node.url, "sns")
        sqs = sqs_client(node.url)
        before = queued(sqs, url)
        assert before < MESSAGES, "the replay ended before the kill: nothing was tested"
        within(lambda: replay_status(sns, subscription) == "Completed", 60.0, 0.1)
        got = drain(sqs, url)
        documents = [json.loads(m["Body"]) for m in got]
        assert len(documents) == MESSAGES  # none twice
        assert sorted(d["MessageId"] for d in documents) == sorted(ids)  # none lost
        assert all(d["Replayed"] is True for d in documents)
        for g in range(GROUPS):
            group = [
                d["Message"]
                for d, m in zip(documents, got, strict=True)
                if m["Attributes"]["MessageGroupId"] == f"g{g}"
            ]
            assert group == [f"m{i}" for i in range(MESSAGES) if i % GROUPS == g]
        print(f"replayed before the kill: {before} of {MESSAGES}")
    finally:
        sns.close()
        sqs.close()
