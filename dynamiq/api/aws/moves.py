"""SQS's message move tasks, as Dynamiq's redrives of a dead-letter queue.

A queue has at most one move task at a time and remembers only its latest
(SQS lists up to ten, newest first). A task's handle names its queue and
its redrive, so any node can cancel it.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from dynamiq.api.aws.call import Action, Call
from dynamiq.api.aws.errors import AwsError
from dynamiq.errors import NotFound, RedriveRunning
from dynamiq.service.reports import RedriveView

__all__ = ["MOVE_ACTIONS"]

MAX_RATE = 500
_STATUS = {"running": "RUNNING", "done": "COMPLETED", "cancelled": "CANCELLED", "failed": "FAILED"}


def _handle(queue: str, task: str) -> str:
    return base64.urlsafe_b64encode(f"{queue}\n{task}".encode()).decode()


def _read_handle(handle: str) -> tuple[str, str]:
    try:
        queue, _, task = base64.urlsafe_b64decode(handle.encode()).decode().partition("\n")
    except (binascii.Error, ValueError):
        queue = task = ""
    if not queue or not task:
        raise AwsError("ResourceNotFoundException", "The task handle is not valid.")
    return queue, task


async def start_message_move_task(call: Call) -> dict[str, Any]:
    source = call.queue_of_arn(call.params.text("SourceArn"), "SourceArn").name
    target = call.params.optional_text("DestinationArn")
    to = None if target is None else call.name_of_arn(target, "DestinationArn")
    rate = call.params.integer("MaxNumberOfMessagesPerSecond", None, 1, MAX_RATE)
    if not call.node.dead_letter_sources(source):
        raise AwsError("InvalidParameterValue", "Source queue must be configured as a DLQ.")
    try:
        view = await call.node.moves.redrive(source, to, None if rate is None else float(rate))
    except RedriveRunning:
        raise AwsError(
            "UnsupportedOperation", "There is already a task running for this queue."
        ) from None
    return {"TaskHandle": _handle(source, view.task)}


async def list_message_move_tasks(call: Call) -> dict[str, Any]:
    source = call.queue_of_arn(call.params.text("SourceArn"), "SourceArn").name
    call.params.integer("MaxResults", None, 1, 10)
    try:
        view = await call.node.moves.redrive_status(source)
    except NotFound:
        return {"Results": []}
    return {"Results": [_listed(call, source, view)]}


def _listed(call: Call, source: str, view: RedriveView) -> dict[str, Any]:
    status = _STATUS[view.state]
    entry: dict[str, Any] = {"Status": status, "SourceArn": call.queue_arn(source)}
    if status == "RUNNING":
        entry["TaskHandle"] = _handle(source, view.task)
        entry["ApproximateNumberOfMessagesToMove"] = view.moved + view.remaining
    if view.to is not None:
        entry["DestinationArn"] = call.queue_arn(view.to)
    if view.max_per_second is not None:
        entry["MaxNumberOfMessagesPerSecond"] = round(view.max_per_second)
    entry["ApproximateNumberOfMessagesMoved"] = view.moved
    if view.error:
        entry["FailureReason"] = view.error
    entry["StartedTimestamp"] = view.started_ms
    return entry


async def cancel_message_move_task(call: Call) -> dict[str, Any]:
    queue, task = _read_handle(call.params.text("TaskHandle"))
    call.queue_named(*call.accounts.address(queue))
    try:
        current = await call.node.moves.redrive_status(queue)
    except NotFound:
        current = None
    if current is None or current.task != task or current.state != "running":
        raise AwsError("ResourceNotFoundException", "The task is not running.")
    view = await call.node.moves.cancel_redrive(queue)
    return {"ApproximateNumberOfMessagesMoved": view.moved}


MOVE_ACTIONS: dict[str, Action] = {
    "StartMessageMoveTask": start_message_move_task,
    "ListMessageMoveTasks": list_message_move_tasks,
    "CancelMessageMoveTask": cancel_message_move_task,
}
