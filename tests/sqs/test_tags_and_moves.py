"""Queue tags and message move tasks (redrives of a dead-letter queue) through boto3."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.servers import require_module
from tests.sqs.conftest import queue_arn
from tests.waiting import until

require_module("boto3", "test")


def test_tags_are_kept_added_and_removed(sqs: Any, new_queue: Any) -> None:
    url = new_queue()
    assert "Tags" not in sqs.list_queue_tags(QueueUrl=url)
    sqs.tag_queue(QueueUrl=url, Tags={"team": "core", "cost": "42"})
    sqs.tag_queue(QueueUrl=url, Tags={"team": "data"})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "data", "cost": "42"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["cost", "absent"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "data"}
    with pytest.raises(sqs.exceptions.ClientError):
        sqs.tag_queue(QueueUrl=url, Tags={f"k{i}": "v" for i in range(51)})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "data"}  # unchanged


def test_a_queue_created_with_tags_keeps_them(sqs: Any) -> None:
    name = f"tagged-{time.monotonic_ns()}"
    url = sqs.create_queue(QueueName=name, tags={"env": "test"})["QueueUrl"]
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "test"}
    assert sqs.create_queue(QueueName=name)["QueueUrl"] == url  # tags are not compared
    sqs.delete_queue(QueueUrl=url)


def dead_lettered(sqs: Any, new_queue: Any, count: int) -> tuple[str, str, str]:
    """A queue whose ``count`` messages all went to its dead-letter queue."""
    dead = new_queue("-dead")
    policy = json.dumps({"deadLetterTargetArn": queue_arn(sqs, dead), "maxReceiveCount": 1})
    url = new_queue(RedrivePolicy=policy)
    for start in range(0, count, 10):
        entries = [
            {"Id": str(i), "MessageBody": f"m{i}"} for i in range(start, min(count, start + 10))
        ]
        sqs.send_message_batch(QueueUrl=url, Entries=entries)
    for _ in range(10 * count):  # each is received once, released, then moved on its next
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not got:
            break
        for m in got:
            sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
            )
    assert depth(sqs, dead) == count
    return url, dead, queue_arn(sqs, dead)


def depth(sqs: Any, url: str) -> int:
    shown = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(shown["Attributes"]["ApproximateNumberOfMessages"])


def test_a_move_task_sends_dead_letters_back_to_their_queue(sqs: Any, new_queue: Any) -> None:
    url, dead, dead_arn = dead_lettered(sqs, new_queue, 5)
    assert depth(sqs, dead) == 5
    assert sqs.list_message_move_tasks(SourceArn=dead_arn)["Results"] == []
    handle = sqs.start_message_move_task(SourceArn=dead_arn)["TaskHandle"]

    def ended() -> dict[str, Any] | None:
        task: dict[str, Any] = sqs.list_message_move_tasks(SourceArn=dead_arn)["Results"][0]
        return task if task["Status"] != "RUNNING" else None

    task = until(ended, what="the move task's end")
    assert task["Status"] == "COMPLETED" and task["ApproximateNumberOfMessagesMoved"] == 5
    assert task["SourceArn"] == dead_arn and task["StartedTimestamp"] > 0
    assert depth(sqs, dead) == 0 and depth(sqs, url) == 5
    with pytest.raises(sqs.exceptions.ResourceNotFoundException):
        sqs.cancel_message_move_task(TaskHandle=handle)  # it is done


def test_a_slow_move_task_can_be_cancelled(sqs: Any, new_queue: Any) -> None:
    _, dead, dead_arn = dead_lettered(sqs, new_queue, 30)
    elsewhere = new_queue("-elsewhere")
    handle = sqs.start_message_move_task(
        SourceArn=dead_arn, DestinationArn=queue_arn(sqs, elsewhere), MaxNumberOfMessagesPerSecond=1
    )["TaskHandle"]
    (running,) = sqs.list_message_move_tasks(SourceArn=dead_arn)["Results"]
    assert running["TaskHandle"] == handle and running["Status"] == "RUNNING"
    assert running["DestinationArn"] == queue_arn(sqs, elsewhere)
    with pytest.raises(sqs.exceptions.ClientError):  # one task per queue at a time
        sqs.start_message_move_task(SourceArn=dead_arn)
    moved = sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"]
    (task,) = sqs.list_message_move_tasks(SourceArn=dead_arn)["Results"]
    assert task["Status"] == "CANCELLED"
    assert depth(sqs, elsewhere) + depth(sqs, dead) == 30 and moved < 30


def test_only_a_dead_letter_queue_is_a_move_task_s_source(sqs: Any, new_queue: Any) -> None:
    with pytest.raises(sqs.exceptions.ClientError) as refused:
        sqs.start_message_move_task(SourceArn=queue_arn(sqs, new_queue()))
    assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
    with pytest.raises(sqs.exceptions.ResourceNotFoundException):
        sqs.cancel_message_move_task(TaskHandle="bm90IGEgaGFuZGxl")
