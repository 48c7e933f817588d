"""Commands that look after queues, topics and the cluster: ``queues``, ``topics``,
``stats``, ``status``, ``redrive``."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from dynamiq.cli.output import Output
from dynamiq.cli.usage import UsageError
from dynamiq.client import AsyncClient

__all__ = ["register"]

REDRIVE_POLL_SECONDS = 0.5


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add the commands to the ``dynamiq`` parser's subcommands."""
    queues = sub.add_parser("queues", help="list, show, create, delete, purge or configure queues")
    qs = queues.add_subparsers(dest="action", required=True, metavar="ACTION")
    _action(
        qs, common, "list", queues_list, "every queue with its depth, messages in flight and rates"
    )
    _action(qs, common, "show", queue_show, "a queue's settings and stats", "queue")
    create = _action(qs, common, "create", queue_create, "create a queue", "queue")
    create.add_argument("settings", nargs="*", metavar="NAME=VALUE", help="settings (JSON values)")
    _action(qs, common, "delete", queue_delete, "delete a queue and its messages", "queue")
    _action(qs, common, "purge", queue_purge, "drop every message of a queue", "queue")
    configure = _action(qs, common, "set", queue_set, "change some settings of a queue", "queue")
    configure.add_argument(
        "settings", nargs="+", metavar="NAME=VALUE", help="settings (JSON values)"
    )
    _register_topics(sub, common)
    _register_cluster(sub, common)


def _register_topics(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``dynamiq topics ...``."""
    topics = sub.add_parser(
        "topics", help="list, show, create or delete topics; (un)subscribe queues"
    )
    ts = topics.add_subparsers(dest="action", required=True, metavar="ACTION")
    _action(ts, common, "list", topics_list, "every topic")
    _action(ts, common, "show", topic_show, "a topic's subscriptions", "topic")
    _action(ts, common, "create", topic_create, "create a topic", "topic")
    _action(ts, common, "delete", topic_delete, "delete a topic (its queues stay)", "topic")
    subscribe = _action(
        ts, common, "subscribe", topic_subscribe, "subscribe a queue, or an endpoint", "topic"
    )
    subscribe.add_argument("queue", nargs="?", help="the queue (or give --endpoint)")
    subscribe.add_argument(
        "--endpoint", metavar="URL", help="push to this http(s) URL instead (a webhook)"
    )
    subscribe.add_argument("--raw", action="store_true", help="webhook: POST bare bodies")
    subscribe.add_argument(
        "--delivery-policy", type=json.loads, help="webhook: SNS's DeliveryPolicy (JSON)"
    )
    subscribe.add_argument("--dead-letter-queue", help="webhook: where undeliverable ones go")
    subscribe.add_argument("--pattern", help="routing-key pattern (* one word, # any)")
    subscribe.add_argument("--filter", type=json.loads, help="filter policy (JSON)")
    subscribe.add_argument(
        "--filter-scope",
        choices=("attributes", "body"),
        help="what the filter looks at: the attributes (the default) or the JSON body",
    )
    unsubscribe = _action(
        ts, common, "unsubscribe", topic_unsubscribe, "unsubscribe a queue, or a webhook", "topic"
    )
    unsubscribe.add_argument("queue", nargs="?", help="the queue (or give --webhook)")
    unsubscribe.add_argument("--webhook", metavar="ID", help="stop this webhook instead")


def _register_cluster(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``dynamiq stats``, ``status`` and ``redrive``."""
    stats = sub.add_parser(
        "stats", parents=[common], help="every queue's depth, in flight and rates"
    )
    stats.add_argument(
        "--watch", type=float, metavar="S", help="redraw every S seconds until Ctrl-C"
    )
    stats.set_defaults(run=show_stats)
    status = sub.add_parser(
        "status", parents=[common], help="the cluster's members and their slices"
    )
    status.set_defaults(run=show_status)
    redrive = sub.add_parser(
        "redrive", parents=[common], help="move a dead-letter queue's messages back, with progress"
    )
    redrive.add_argument("queue", help="the dead-letter queue")
    redrive.add_argument("--to", help="one queue to move them to (default: each message's source)")
    redrive.add_argument("--rate", type=float, metavar="N", help="at most N messages per second")
    redrive.set_defaults(run=redrive_queue)


def _action(
    sub: Any, common: argparse.ArgumentParser, name: str, run: Any, text: str, *names: str
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, parents=[common], help=text, description=text
    )
    for arg in names:
        parser.add_argument(arg)
    parser.set_defaults(run=run)
    return parser


def settings_of(pairs: list[str]) -> dict[str, Any]:
    """``name=value`` pairs as settings: values are JSON (``30``, ``true``, ``null``, ``{...}``)
    or else text."""
    settings: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"expected NAME=VALUE, got {pair!r}")
        try:
            settings[name] = json.loads(text)
        except json.JSONDecodeError:
            settings[name] = text
    return settings


# -- queues -------------------------------------------------------------------------


def _queue_rows(stats: dict[str, Any]) -> list[list[Any]]:
    return [
        [
            q["queue"],
            q["depth"],
            q["visible"],
            q["in_flight"],
            q["delayed"],
            q["oldest_age_seconds"],
            q["rates"]["publish"],
            q["rates"]["receive"],
            q["rates"]["delete"],
        ]
        for q in stats["queues"]
    ]


QUEUE_HEADERS = (
    "queue",
    "depth",
    "visible",
    "in flight",
    "delayed",
    "oldest s",
    "pub/s",
    "recv/s",
    "del/s",
)


async def queues_list(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    stats = await client.stats()
    out.result(stats["queues"], QUEUE_HEADERS, _queue_rows(stats))
    return 0


async def queue_show(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    out.result(await client.queue(args.queue))
    return 0


async def queue_create(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    out.result(await client.create_queue(args.queue, **settings_of(args.settings)))
    return 0


async def queue_delete(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    await client.delete_queue(args.queue)
    out.result({"deleted": args.queue})
    return 0


async def queue_purge(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    out.result({"purged": await client.purge_queue(args.queue)})
    return 0


async def queue_set(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    out.result(await client.configure_queue(args.queue, **settings_of(args.settings)))
    return 0


# -- topics -------------------------------------------------------------------------


async def topics_list(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    names = await client.topics()
    out.result(names, ("topic",), [[n] for n in names])
    return 0


async def topic_show(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    subs = await client.subscriptions(args.topic)
    hooks = await client.webhooks(args.topic)
    rows = [[s["queue"], s.get("pattern"), s.get("filter"), "", "", ""] for s in subs]
    rows += [
        [h["url"], None, h.get("filter"), h["state"], h["pending"], h["in_flight"]] for h in hooks
    ]
    out.result(
        {"topic": args.topic, "subscriptions": subs, "webhooks": hooks},
        ("queue / endpoint", "pattern", "filter", "state", "pending", "in flight"),
        rows,
    )
    return 0


async def topic_create(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    await client.create_topic(args.topic)
    out.result({"created": args.topic})
    return 0


async def topic_delete(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    await client.delete_topic(args.topic)
    out.result({"deleted": args.topic})
    return 0


async def topic_subscribe(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    if (args.queue is None) == (args.endpoint is None):
        raise SystemExit("dynamiq topics subscribe: give a queue or --endpoint URL, not both")
    if args.endpoint is not None:
        hook = await client.create_webhook(
            args.topic,
            args.endpoint,
            filter=args.filter,
            filter_scope=args.filter_scope,
            raw=args.raw or None,
            delivery_policy=args.delivery_policy,
            dead_letter_queue=args.dead_letter_queue,
        )
        out.result(hook)
        return 0
    queues = await client.subscribe(
        args.topic,
        args.queue,
        pattern=args.pattern,
        filter_policy=args.filter,
        filter_scope=args.filter_scope,
    )
    out.result({"topic": args.topic, "queues": queues})
    return 0


async def topic_unsubscribe(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    if (args.queue is None) == (args.webhook is None):
        raise SystemExit("dynamiq topics unsubscribe: give a queue or --webhook ID, not both")
    if args.webhook is not None:
        await client.delete_webhook(args.topic, args.webhook)
        out.result({"topic": args.topic, "deleted": args.webhook})
        return 0
    queues = await client.unsubscribe(args.topic, args.queue)
    out.result({"topic": args.topic, "queues": queues})
    return 0


# -- the cluster --------------------------------------------------------------------


async def show_stats(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    while True:
        stats = await client.stats()
        if args.watch and not out.as_json and out.out.isatty():
            out.out.write("\x1b[2J\x1b[H")  # redraw in place
        out.result(stats, QUEUE_HEADERS, _queue_rows(stats))
        if not args.watch:
            return 0
        await asyncio.sleep(args.watch)


async def show_status(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    status = await client.status()
    rows = [
        [m["name"], m["http"], m["state"], " .. ".join(m["slice"]) if m["slice"] else "-"]
        for m in status["members"]
    ]
    out.result(status, ("member", "http", "state", "slice"), rows)
    return 0


async def redrive_queue(args: argparse.Namespace, client: AsyncClient, out: Output) -> int:
    task = await client.redrive(args.queue, to=args.to, max_per_second=args.rate)
    progress = out.progress(f"redrive {args.queue}", task["moved"] + task["remaining"])
    moved = task["moved"]
    progress.advance(moved)
    while task["state"] == "running":
        await asyncio.sleep(REDRIVE_POLL_SECONDS)
        task = await client.redrive_status(args.queue)
        progress.advance(task["moved"] - moved)
        moved = task["moved"]
    progress.close()
    out.result(task)
    return 0 if task["state"] == "done" else 1
