"""Commands that move messages: ``publish``, ``consume``, ``peek``, ``spool``.

Messages travel as JSON lines in the v2 API's form: ``body`` (text, or
base64 with ``"encoding": "base64"``), and ``attributes``, ``delay_seconds``,
``ttl_seconds``, ``group``, ``dedup_id``, ``routing_key`` when set. What
``consume`` writes, ``publish --file`` reads back (ids and counts are ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import msgspec

from dynamiq.cli.output import Output
from dynamiq.cli.usage import UsageError
from dynamiq.client import AsyncClient
from dynamiq.client.batches import MAX_BATCH, batches
from dynamiq.client.spool import Spool
from dynamiq.client.wire import attributes_field, attributes_of, body_field, body_of
from dynamiq.models import Message, Outgoing

__all__ = ["message_line", "outgoing_of", "register"]

_encode = msgspec.json.Encoder().encode


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the commands to the ``dynamiq`` parser's subcommands."""
    for add in (_publish_command, _consume_command, _peek_command, _spool_command):
        add(sub, common)


def _publish_command(sub: Any, common: argparse.ArgumentParser) -> None:
    publish = sub.add_parser(
        "publish",
        parents=[common],
        help="publish bodies, stdin's lines or a file of JSON lines",
        description="Publish to QUEUE (or --topic T) the BODY arguments, else a "
        "--file of JSON lines, else stdin's lines (one body each).",
    )
    publish.add_argument("names", nargs="*", metavar="QUEUE [BODY ...]")
    publish.add_argument("--topic", help="publish to this topic (every argument is a body)")
    publish.add_argument(
        "--file", type=Path, help="JSON lines: body, attributes, delay_seconds, group, ..."
    )
    publish.add_argument(
        "--batch", type=int, default=500, help="messages per request (default 500)"
    )
    publish.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="requests in flight (default 4; 1 keeps the order)",
    )
    publish.add_argument(
        "--spool", type=Path, help="keep what no node takes in this spool directory"
    )
    publish.set_defaults(run=publish_messages)


def _consume_command(sub: Any, common: argparse.ArgumentParser) -> None:
    consume = sub.add_parser(
        "consume",
        parents=[common],
        help="receive messages as JSON lines, deleting each once written",
        description="Receive QUEUE's messages and write them as JSON lines; each is "
        "deleted only after its line was written and flushed.",
    )
    consume.add_argument("queue")
    consume.add_argument("--max", type=int, help="stop after N messages")
    consume.add_argument(
        "--wait", type=float, default=1.0, help="stop after S seconds without one (default 1)"
    )
    consume.add_argument("--follow", action="store_true", help="keep consuming until Ctrl-C")
    consume.add_argument(
        "--no-delete", action="store_true", help="leave them leased: they come again"
    )
    consume.add_argument("--output", type=Path, help="append to this file instead of stdout")
    consume.add_argument(
        "--batch", type=int, default=100, help="messages per receive (default 100)"
    )
    consume.add_argument(
        "--visibility", type=float, default=30.0, help="lease seconds (default 30)"
    )
    consume.set_defaults(run=consume_messages)


def _peek_command(sub: Any, common: argparse.ArgumentParser) -> None:
    peek = sub.add_parser("peek", parents=[common], help="read messages without leasing them")
    peek.add_argument("queue")
    peek.add_argument("id", nargs="?", type=int, help="one message (default: the oldest)")
    peek.add_argument("--max", type=int, default=10, help="how many of the oldest (default 10)")
    peek.set_defaults(run=peek_messages)


def _spool_command(sub: Any, common: argparse.ArgumentParser) -> None:
    spool = sub.add_parser("spool", help="a producer spool: show it, or send what it keeps")
    actions = spool.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, run, text in (
        ("show", spool_show, "how much a spool keeps"),
        ("flush", spool_flush, "send what a spool keeps, in order"),
    ):
        parser = actions.add_parser(name, parents=[common], help=text, description=text)
        parser.add_argument("path", type=Path, help="the spool directory")
        parser.set_defaults(run=run, own_spool=True)


# -- JSON lines -----------------------------------------------------------------------


def message_line(m: Message) -> str:
    """A received message as a JSON line (the API's form)."""
    line: dict[str, Any] = {"id": str(m.id), **body_field(m.body), "receive_count": m.receive_count}
    line["published_at"] = m.published_ms
    if m.attributes:
        line["attributes"] = attributes_field(m.attributes)
    for name in ("group", "routing_key"):
        if (value := getattr(m, name)) is not None:
            line[name] = value
    return _encode(line).decode()


def outgoing_of(line: str, number: int) -> Outgoing:
    """A message to publish from a JSON line (``number`` names it in errors)."""
    try:
        data = json.loads(line)
        return Outgoing(
            body_of(data),
            delay_seconds=data.get("delay_seconds"),
            ttl_seconds=data.get("ttl_seconds"),
            attributes=attributes_of(data.get("attributes")),
            routing_key=data.get("routing_key"),
            dedup_id=data.get("dedup_id"),
            group=data.get("group"),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"line {number}: not a message ({exc!r})") from None


# -- publish --------------------------------------------------------------------------


async def publish_messages(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    names: list[str] = list(args.names)
    if args.topic is None and not names:
        raise UsageError("publish: name a QUEUE or --topic T")
    target = args.topic if args.topic is not None else names.pop(0)
    if not 1 <= args.batch <= MAX_BATCH or args.concurrency < 1:
        raise UsageError(f"publish: --batch must be 1-{MAX_BATCH}, --concurrency >= 1")
    if names and args.file is not None:
        raise UsageError("publish: give BODY arguments or --file, not both")
    total, messages = _source(names, args.file)
    progress = out.progress(f"publish {target}", total)
    counts = {"published": 0, "spooled": 0, "duplicates": 0}
    slots = asyncio.Semaphore(args.concurrency)

    async def send(batch: list[Outgoing]) -> None:
        try:
            if args.topic is not None:
                answer: Any = await client.publish_topic(target, batch)
            else:
                answer = await client.publish(target, batch)
            if answer.spooled:
                counts["spooled"] += len(batch)
            else:
                counts["published"] += len(batch)
                counts["duplicates"] += _duplicates(answer)
            progress.advance(len(batch))
        finally:
            slots.release()

    pending: set[asyncio.Task[None]] = set()
    try:
        for batch in batches(messages, args.batch):
            await slots.acquire()
            for task in [t for t in pending if t.done()]:
                pending.discard(task)
                task.result()  # a failed request fails the command
            pending.add(asyncio.create_task(send(batch)))
        await asyncio.gather(*pending)
    finally:
        progress.close()
        for task in pending:
            task.cancel()
    out.result({"to": target, **counts})
    return 0


def _duplicates(answer: Any) -> int:
    if isinstance(answer, dict):
        return sum(sum(ids.duplicate) for ids in answer.values())
    return sum(answer.duplicate)


def _source(bodies: list[str], file: Path | None) -> tuple[int | None, Iterator[Outgoing]]:
    """How many messages (None: unknown), and the messages."""
    if bodies:
        return len(bodies), (Outgoing(b.encode()) for b in bodies)
    if file is not None:
        try:
            with open(file, "rb") as counting:
                total = sum(
                    chunk.count(b"\n") for chunk in iter(lambda: counting.read(1 << 20), b"")
                )
            lines: IO[str] = open(file, encoding="utf-8")  # noqa: SIM115 - read lazily below
        except OSError as exc:
            raise UsageError(f"publish: cannot read {file}: {exc.strerror}") from None
        return total, _from_lines(lines)
    return None, (Outgoing(line.rstrip("\n").encode()) for line in sys.stdin)


def _from_lines(lines: IO[str]) -> Iterator[Outgoing]:
    with lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                yield outgoing_of(line, number)


# -- consume and peek -----------------------------------------------------------------


async def consume_messages(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    if args.max is not None and args.max < 1:
        raise UsageError("consume: --max must be >= 1")
    if not 1 <= args.batch <= MAX_BATCH:
        raise UsageError(f"consume: --batch must be 1-{MAX_BATCH}")
    sink: IO[str] = out.out
    if args.output is not None:
        try:
            sink = await asyncio.to_thread(open, args.output, "a", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"consume: cannot write {args.output}: {exc.strerror}") from None
    progress = out.progress(f"consume {args.queue}", args.max) if args.output else None

    async def write(batch: list[Message]) -> None:
        sink.write("".join([message_line(m) + "\n" for m in batch]))
        sink.flush()  # written before they are deleted
        if progress is not None:
            progress.advance(len(batch))

    try:
        report = await client.consume(
            args.queue,
            write,
            concurrency=2,
            batch=args.batch,
            batched=True,
            receivers=2,
            max_in_flight=4 * args.batch,
            visibility_timeout=args.visibility,
            limit=args.max,
            idle_timeout=None if args.follow else args.wait,
            delete=not args.no_delete,
        )
    finally:
        if progress is not None:
            progress.close()
        if sink is not out.out:
            sink.close()
    out.note(
        f"consumed {report.succeeded:,} from {args.queue}"
        + (f", released {report.released:,}" if report.released else "")
        + (f", {report.unsettled:,} not deleted (no node answered)" if report.unsettled else "")
    )
    return 1 if report.unsettled else 0


async def peek_messages(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    if args.id is not None:
        found = [await client.peek(args.queue, args.id)]
    else:
        found = await client.peek_oldest(args.queue, args.max)
    if out.as_json:
        for m in found:
            out.line(message_line(m))
        return 0
    rows = [
        [str(m.id), _time(m.published_ms), m.receive_count, m.group, _short(m.body)] for m in found
    ]
    out.table(("id", "published", "receives", "group", "body"), rows)
    return 0


def _time(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds")


def _short(body: bytes, width: int = 60) -> str:
    text = body.decode(errors="replace").replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


# -- the spool ------------------------------------------------------------------------


async def spool_show(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    spool = await asyncio.to_thread(Spool, args.path)
    try:
        requests, messages = await asyncio.to_thread(spool.backlog)
        out.result(
            {
                "path": str(args.path),
                "requests": requests,
                "messages": messages,
                "bytes": spool.size,
            }
        )
    finally:
        spool.close()
    return 0


async def spool_flush(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    spool = await asyncio.to_thread(Spool, args.path)
    try:
        _, total = await asyncio.to_thread(spool.backlog)
        progress = out.progress(f"spool {args.path}", total)
        async with AsyncClient(
            client.urls, spool=spool, spool_sender=False, key=client.key or "", ca_file=args.ca_file
        ) as sender:
            try:
                sent = await sender.flush_spool(progress.advance)
            finally:
                progress.close()
        out.result({"path": str(args.path), "sent": sent, "left": spool.pending})
    finally:
        spool.close()
    return 0
