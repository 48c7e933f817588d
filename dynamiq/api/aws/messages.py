"""SQS's message actions: send, receive, delete and change visibility, one or a batch.

Message ids are Dynamiq's ids as text; a receipt handle names the delivery
(``receipts``), so a handle from an earlier receive deletes nothing and
changes nothing once the message was received again, as SQS documents.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from dynamiq.api.aws.attributes import (
    received_attributes,
    rendered,
    sent_attributes,
    typed_size,
    valid_body,
)
from dynamiq.api.aws.call import Action, Call, Leasing
from dynamiq.api.aws.digests import attributes_md5, body_md5
from dynamiq.api.aws.errors import AwsError, sqs_error
from dynamiq.api.aws.params import Params, batch_entries, checked_entries, failure
from dynamiq.api.aws.receipts import Receipt, read_receipt
from dynamiq.models import (
    TOKEN,
    Message,
    Outgoing,
    QueueRecord,
    ReceiveRequest,
)

__all__ = ["MESSAGE_ACTIONS"]

MAX_RECEIVE = 10
MAX_WAIT = 20
MAX_VISIBILITY = 43_200
SYSTEM_ATTRIBUTES = frozenset(
    {
        "SenderId",
        "SentTimestamp",
        "ApproximateReceiveCount",
        "ApproximateFirstReceiveTimestamp",
        "SequenceNumber",
        "MessageDeduplicationId",
        "MessageGroupId",
        "AWSTraceHeader",
        "DeadLetterQueueSourceArn",
    }
)


class _Sent:
    """One message to send, checked, with the digests its answer carries."""

    def __init__(self, call: Call, record: QueueRecord, entry: Params) -> None:
        settings = record.settings
        body = valid_body(entry.text("MessageBody"))
        attributes = sent_attributes(entry.data.get("MessageAttributes"))
        system = sent_attributes(entry.data.get("MessageSystemAttributes")).typed
        delay = entry.integer("DelaySeconds", None, 0, 900)
        group = _token(entry, "MessageGroupId")
        dedup_id = _token(entry, "MessageDeduplicationId")
        tenant = None
        if settings.fifo:
            _check_fifo(delay, group, dedup_id, settings.content_dedup)
            delay = None  # 0 at most: the queue's own delay applies
        else:  # a standard queue's group names a tenant (a fair queue): no order
            group, tenant = None, group
        encoded = body.encode()
        limit = call.node.message_limit(settings)
        if len(encoded) + typed_size(attributes.typed) > limit:
            raise AwsError(
                "InvalidParameterValue",
                f"One or more parameters are invalid. Reason: Message must be shorter than "
                f"{limit} bytes.",
            )
        if dedup_id is None and settings.content_dedup:
            # SQS's content-based id: the body's SHA-256, attributes left out; kept and
            # shown as the message's MessageDeduplicationId.
            dedup_id = hashlib.sha256(encoded).hexdigest()
        trace = system.get("AWSTraceHeader")
        self.message = Outgoing(
            encoded,
            delay_seconds=delay,
            attributes=attributes.kept or None,
            dedup_id=dedup_id,
            group=group,
            trace=None if trace is None else str(trace[1]),
            attribute_types=attributes.types or None,
            tenant=tenant,
        )
        self.answer: dict[str, Any] = {"MD5OfMessageBody": body_md5(encoded)}
        if attributes.typed:
            self.answer["MD5OfMessageAttributes"] = attributes_md5(attributes.typed)
        if system:
            self.answer["MD5OfMessageSystemAttributes"] = attributes_md5(system)

    def sent(self, message_id: int, fifo: bool) -> dict[str, Any]:
        answer = {"MessageId": str(message_id), **self.answer}
        if fifo:
            answer["SequenceNumber"] = f"{message_id:020d}"
        return answer


async def send_message(call: Call) -> dict[str, Any]:
    record = call.queue()
    sent = _Sent(call, record, call.params)
    (message_id,) = await call.node.publish(record.name, [sent.message])
    return sent.sent(message_id, record.settings.fifo)


def _token(entry: Params, name: str) -> str | None:
    """A group or deduplication id, refused with SQS's text unless 1-128 printable
    characters of ASCII, no spaces."""
    value = entry.optional_text(name)
    if value is not None and not TOKEN.fullmatch(value):
        raise AwsError(
            "InvalidParameterValue",
            f"Value {value} for parameter {name} is invalid. Reason: {name} can only include "
            "alphanumeric and punctuation characters. 1 to 128 in length.",
        )
    return value


def _check_fifo(
    delay: int | None, group: str | None, dedup_id: str | None, content_dedup: bool
) -> None:
    """Refuse what a FIFO queue does not take: a delay of a message's own (0 is no delay),
    no group, no deduplication id where the queue does not hash the content."""
    if delay:
        raise AwsError(
            "InvalidParameterValue",
            f"Value {delay} for parameter DelaySeconds is invalid. Reason: The request "
            "include parameter that is not valid for this queue type.",
        )
    _check_ids(group, dedup_id, content_dedup, "MissingParameter")


def _check_fifo_batch(entries: list[dict[str, Any]], content_dedup: bool) -> None:
    """Refuse a FIFO batch whole, as SQS does, when an entry has no group, or no
    deduplication id where the queue does not hash the content."""
    for entry in entries:
        group, dedup_id = entry.get("MessageGroupId"), entry.get("MessageDeduplicationId")
        _check_ids(group, dedup_id, content_dedup, "InvalidParameterValue")


def _check_ids(group: object, dedup_id: object, content_dedup: bool, no_group: str) -> None:
    """Refuse a FIFO message without a group (SQS's code ``no_group``: a batch's differs
    from a single send's), or without a deduplication id the queue does not make."""
    if group is None:
        raise AwsError(no_group, "The request must contain the parameter MessageGroupId.")
    if dedup_id is None and not content_dedup:
        raise AwsError(
            "InvalidParameterValue",
            "The queue should either have ContentBasedDeduplication enabled or "
            "MessageDeduplicationId provided explicitly",
        )


async def send_message_batch(call: Call) -> dict[str, Any]:
    record = call.queue()
    entries = batch_entries(call.params, "SendMessageBatchRequestEntry")
    if record.settings.fifo:
        _check_fifo_batch(entries, record.settings.content_dedup)
    total = sum(len(str(e.get("MessageBody", "")).encode()) for e in entries)  # bytes, as SQS
    limit = call.node.message_limit(record.settings)
    if total > limit:
        raise AwsError(
            "BatchRequestTooLong",
            f"Batch requests cannot be longer than {limit} bytes. You have sent {total} bytes.",
        )
    ok, failed = checked_entries(entries, lambda entry: _Sent(call, record, entry), sqs_error)
    successful: list[dict[str, Any]] = []
    if ok:
        ids = await call.node.publish(record.name, [sent.message for _, sent in ok])
        fifo = record.settings.fifo
        successful = [
            {"Id": entry_id, **sent.sent(mid, fifo)}
            for (entry_id, sent), mid in zip(ok, ids, strict=True)
        ]
    return {"Successful": successful, "Failed": failed}


async def receive_message(call: Call) -> Leasing:
    record = call.queue()
    params = call.params
    want = params.integer("MaxNumberOfMessages", 1, 1, MAX_RECEIVE)
    asked = params.integer("WaitTimeSeconds", None, 0, MAX_WAIT)
    wait = call.node.wait_of(record.name, None if asked is None else float(asked))
    lease = params.integer("VisibilityTimeout", None, 0, MAX_VISIBILITY)
    system = set(params.strings("AttributeNames")) | set(
        params.strings("MessageSystemAttributeNames")
    )
    if "All" in system:
        system = set(SYSTEM_ATTRIBUTES)
    wanted = params.strings("MessageAttributeNames")
    assert want is not None

    def render(got: list[Message]) -> dict[str, Any]:
        if not got:
            return {}
        now_ms = int(time.time() * 1000)
        return {"Messages": [_received(call, record, m, now_ms, system, wanted) for m in got]}

    ask = ReceiveRequest(record.name, want, None if lease is None else float(lease), wait)
    return Leasing(ask, render)


def _received(
    call: Call, record: QueueRecord, m: Message, now_ms: int, system: set[str], wanted: list[str]
) -> dict[str, Any]:
    body = m.body.decode(errors="replace")
    out: dict[str, Any] = {
        "MessageId": str(m.id),
        "ReceiptHandle": Receipt(m.id, m.receive_count, now_ms).handle(record.uid),
        "MD5OfBody": body_md5(body),
        "Body": body,
    }
    if system:
        shown = _system_attributes(call, record, m)
        out["Attributes"] = {k: v for k, v in shown.items() if k in system}
    typed = received_attributes(m.attributes, wanted, m.attribute_types)
    if typed:
        out["MessageAttributes"] = rendered(typed)
        out["MD5OfMessageAttributes"] = attributes_md5(typed)
    return out


def _system_attributes(call: Call, record: QueueRecord, m: Message) -> dict[str, str]:
    shown = {
        "SenderId": call.account,
        "SentTimestamp": str(m.published_ms),
        "ApproximateReceiveCount": str(m.receive_count),
        "ApproximateFirstReceiveTimestamp": str(m.first_received_ms),
    }
    if (group := m.group or m.tenant) is not None:
        shown["MessageGroupId"] = group
    if m.dedup_id is not None:
        shown["MessageDeduplicationId"] = m.dedup_id
    if m.trace is not None:
        shown["AWSTraceHeader"] = m.trace
    if record.settings.fifo:
        shown["SequenceNumber"] = f"{m.id:020d}"
    if m.dead_letter is not None:
        shown["DeadLetterQueueSourceArn"] = call.queue_arn(m.dead_letter.source_queue)
    return shown


# -- delete and visibility ---------------------------------------------------------------


def _receipt(record: QueueRecord, handle: str) -> Receipt:
    receipt = read_receipt(handle, record.uid)
    if receipt is None:
        raise AwsError(
            "ReceiptHandleIsInvalid",
            f'The input receipt handle "{handle}" is not a valid receipt handle.',
        )
    return receipt


async def delete_message(call: Call) -> dict[str, Any]:
    record = call.queue()
    receipt = _receipt(record, call.params.text("ReceiptHandle"))
    await call.node.delete_delivered(record.name, [receipt.delivery])
    return {}


async def change_message_visibility(call: Call) -> dict[str, Any]:
    record = call.queue()
    receipt = _receipt(record, call.params.text("ReceiptHandle"))
    seconds = _visibility(call.params)
    # The message's current lease, whichever receive's handle names it (as SQS does)
    if not await call.node.change_visibility(record.name, [receipt.message_id], seconds):
        raise _not_in_flight(call.params.text("ReceiptHandle"))
    return {}


def _not_in_flight(handle: str) -> AwsError:
    return AwsError(
        "InvalidParameterValue",
        f"Value {handle} for parameter ReceiptHandle is invalid. Reason: Message does not "
        "exist or is not available for visibility timeout change.",
    )


Delivery = tuple[int, int]  # (message id, receive count): what a receipt names


async def _settle_batch(
    call: Call,
    entry: str,
    read: Callable[[Params], float | None],
    settle: Callable[[str, list[tuple[Delivery, float | None]]], Awaitable[set[int] | None]],
) -> dict[str, Any]:
    """Delete or change a batch of receipts: an entry that does not ``read`` fails alone,
    the rest are settled together. When ``settle`` answers which messages it
    settled, an entry whose message is not among them fails as not in flight."""
    record = call.queue()

    def check(entry: Params) -> tuple[str, Delivery, float | None]:
        handle = entry.text("ReceiptHandle")
        return handle, _receipt(record, handle).delivery, read(entry)

    good, failed = checked_entries(batch_entries(call.params, entry), check, sqs_error)
    done = await settle(record.name, [(d, extra) for _, (_, d, extra) in good]) if good else None
    successful = []
    for entry_id, (handle, (message_id, _), _) in good:
        if done is None or message_id in done:
            successful.append({"Id": entry_id})
        else:
            failed.append(failure(entry_id, _not_in_flight(handle)))
    return {"Successful": successful, "Failed": failed}


async def delete_message_batch(call: Call) -> dict[str, Any]:
    async def delete(queue: str, deliveries: list[tuple[Delivery, float | None]]) -> None:
        await call.node.delete_delivered(queue, [d for d, _ in deliveries])

    return await _settle_batch(call, "DeleteMessageBatchRequestEntry", lambda _: None, delete)


async def change_message_visibility_batch(call: Call) -> dict[str, Any]:
    async def change(queue: str, deliveries: list[tuple[Delivery, float | None]]) -> set[int]:
        by_seconds: dict[float, list[int]] = {}
        for (message_id, _), seconds in deliveries:  # the current lease, as above
            by_seconds.setdefault(seconds or 0.0, []).append(message_id)
        changed: set[int] = set()
        for seconds, ids in by_seconds.items():
            changed.update(await call.node.change_visibility(queue, ids, seconds))
        return changed

    entry = "ChangeMessageVisibilityBatchRequestEntry"
    return await _settle_batch(call, entry, _visibility, change)


def _visibility(params: Params) -> float:
    seconds = params.integer("VisibilityTimeout", None, 0, MAX_VISIBILITY)
    if seconds is None:
        raise AwsError(
            "MissingParameter", "The request must contain the parameter VisibilityTimeout."
        )
    return float(seconds)


MESSAGE_ACTIONS: dict[str, Action] = {
    "SendMessage": send_message,
    "SendMessageBatch": send_message_batch,
    "ReceiveMessage": receive_message,
    "DeleteMessage": delete_message,
    "DeleteMessageBatch": delete_message_batch,
    "ChangeMessageVisibility": change_message_visibility,
    "ChangeMessageVisibilityBatch": change_message_visibility_batch,
}
