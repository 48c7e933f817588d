"""SNS through boto3 on a node that makes at most two copies of a message before its
answer (``limits.syncfanout``): wider publishes are copied behind the answer, raw and
in SNS's envelope, as SNS delivers to SQS queues."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NodeProcess
from tests.servers import flush_redis, require_module
from tests.sqs.conftest import queue_arn
from tests.sqs.test_sns import ORDER_ATTRIBUTES, drain, new_topic

require_module("boto3", "test")


@pytest.fixture(scope="module", params=["lmdb", "redis-cluster"])
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A node of each store that spreads any message for more than two queues."""
    data = Path(tmp_path_factory.mktemp(f"sns-wide-{request.param}"))
    flags = ["--limits-syncfanout", "2"]
    if request.param == "redis-cluster":
        url: str = request.getfixturevalue("redis_cluster_url")
        asyncio.run(flush_redis(url))
        flags += ["--storage-backend", "redis", "--storage-url", url]
    started = NodeProcess(data, *flags).start()
    try:
        yield started.url
    finally:
        started.stop()


def test_a_wide_publish_reaches_raw_and_enveloped_queues_behind_the_answer(
    sns: Any, sqs: Any, new_queue: Any
) -> None:
    topic = new_topic(sns)
    raw = [new_queue() for _ in range(3)]
    wrapped = [new_queue() for _ in range(2)]
    for urls, attributes in ((raw, {"RawMessageDelivery": "true"}), (wrapped, {})):
        for url in urls:
            endpoint = queue_arn(sqs, url)
            sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=endpoint, Attributes=attributes)
    sent = [
        sns.publish(TopicArn=topic, Message=f"order {n}", MessageAttributes=ORDER_ATTRIBUTES)
        for n in range(2)
    ]
    for url in raw:
        got = drain(sqs, url, 2, attributes=True)
        assert sorted(m["Body"] for m in got) == ["order 0", "order 1"]
        assert all(m["MessageAttributes"]["amount"]["StringValue"] == "250" for m in got)
    for url in wrapped:
        notices = [json.loads(m["Body"]) for m in drain(sqs, url, 2)]
        by_id = {n["MessageId"]: n for n in notices}
        assert sorted(by_id) == sorted(s["MessageId"] for s in sent)
        for n, answer in enumerate(sent):
            notice = by_id[answer["MessageId"]]
            assert notice["Type"] == "Notification" and notice["TopicArn"] == topic
            assert notice["Message"] == f"order {n}"
            assert notice["MessageAttributes"]["amount"]["Value"] == "250"


def test_a_wide_publish_batch_reaches_every_queue_once(sns: Any, sqs: Any, new_queue: Any) -> None:
    topic = new_topic(sns)
    urls = [new_queue() for _ in range(4)]
    for url in urls:
        sns.subscribe(
            TopicArn=topic,
            Protocol="sqs",
            Endpoint=queue_arn(sqs, url),
            Attributes={"RawMessageDelivery": "true"},
        )
    entries = [{"Id": f"m{i}", "Message": f"entry {i}"} for i in range(5)]
    answer = sns.publish_batch(TopicArn=topic, PublishBatchRequestEntries=entries)
    assert len(answer["Successful"]) == 5
    for url in urls:
        assert sorted(m["Body"] for m in drain(sqs, url, 5)) == [f"entry {i}" for i in range(5)]
