"""Push deliveries are durable: a node killed with kill -9 while it pushes to an endpoint
delivers, once restarted, every message whose publish it acknowledged (at least once;
what was in flight at the kill may come twice)."""

from __future__ import annotations

import signal
import urllib.request
import uuid
from typing import Any

from dynamiq.testing.endpoint import Receiver
from tests.conftest import NodeFactory
from tests.servers import require_module
from tests.sqs.conftest import sqs_client
from tests.waiting import within

require_module("boto3", "test")

MESSAGES = 1000


def test_kill_9_while_pushing_loses_nothing(
    node_factory: NodeFactory, process_store: tuple[str, ...]
) -> None:
    flags = ("--push-timeout", "1", "--push-connecttimeout", "1", *process_store)
    node = node_factory(*flags).start()
    receiver = Receiver(delay=0.02)  # a little slow: deliveries are in flight at the kill
    sns: Any = sqs_client(node.url, "sns")
    try:
        topic = sns.create_topic(Name=f"t-{uuid.uuid4().hex[:8]}")["TopicArn"]
        sns.subscribe(TopicArn=topic, Protocol="http", Endpoint=receiver.url)
        asked = receiver.wait_for("SubscriptionConfirmation")[0].document()
        with urllib.request.urlopen(asked["SubscribeURL"], timeout=10):
            pass
        acknowledged: set[str] = set()
        for start in range(0, MESSAGES, 10):
            entries = [{"Id": str(i), "Message": f"m{start + i}"} for i in range(10)]
            answer = sns.publish_batch(TopicArn=topic, PublishBatchRequestEntries=entries)
            acknowledged |= {e["MessageId"] for e in answer["Successful"]}
        assert len(acknowledged) == MESSAGES
        receiver.wait_for("Notification", 30)
        node.signal(signal.SIGKILL)
        node.wait()
        before = len(receiver.of("Notification"))
        assert before < MESSAGES, "every message went out before the kill: nothing was tested"

        node_factory(*flags, data=node.data).start()  # a new port: the same subscription

        def delivered_now() -> set[str]:
            return {d.document()["MessageId"] for d in receiver.of("Notification")}

        within(lambda: delivered_now() >= acknowledged, 60.0, 0.1)
        delivered = delivered_now()
        assert delivered == acknowledged, f"{len(acknowledged - delivered)} never delivered"
        duplicates = len(receiver.of("Notification")) - len(delivered)
        print(f"delivered before the kill: {before}; duplicates after it: {duplicates}")
    finally:
        sns.close()
        receiver.close()
