"""The v2 JSON batch API's handlers: each parses a request, calls one ``Node`` method,
renders its answer. The table of routes is ``v2``."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable
from typing import Any

import msgspec
from aiohttp import web

from dynamiq.access.policy import PolicyError, parse
from dynamiq.access.roles import Principal
from dynamiq.api import schemas as s
from dynamiq.api.bodies import encode_message, iso_time, json_response, outgoing, read_json
from dynamiq.api.delivery import deliver
from dynamiq.api.routes import (
    node,
    queue_name,
    queue_param,
    topic_name,
    who,
)
from dynamiq.errors import Invalid
from dynamiq.models import Message, Outgoing, Published, ReceiveRequest, parse_id
from dynamiq.service.node import Node
from dynamiq.service.reports import QueueView, RedriveView, Subscribers, SubscriptionView

LIST_PAGE, MAX_LIST_PAGE = 1000, 10_000  # names per page of a listing: by default, at most
STATS_PAGE = 100  # queues per page of /v2/stats by default (each costs a few store reads)

__all__ = [
    "_outgoing",
    "cancel_redrive",
    "change_visibility",
    "configure_queue",
    "create_queue",
    "create_topic",
    "delete",
    "delete_queue",
    "delete_topic",
    "deleted",
    "get_queue",
    "get_topic",
    "list_queues",
    "list_topics",
    "node_stats",
    "outgoing_batch",
    "peek",
    "peek_many",
    "publish",
    "publish_topic",
    "published",
    "purge_queue",
    "queue_stats",
    "receive",
    "receive_ask",
    "redrive",
    "redrive_status",
    "status",
    "subscribe",
    "unsubscribe",
]


# -- queues -------------------------------------------------------------------


def _info(view: QueueView, caller: Principal) -> s.QueueInfo:
    stats = view.stats
    settings = view.settings.to_dict()
    if settings.get("dead_letter_queue"):
        settings["dead_letter_queue"] = caller.shown(settings["dead_letter_queue"])
    return s.QueueInfo(
        name=caller.shown(view.name),
        settings=msgspec.convert(settings, s.QueueSettingsBody),
        stats=s.QueueStatsBody(stats.depth, stats.in_flight, stats.partitions),
        expires_at=None if view.expires_at_ms is None else iso_time(view.expires_at_ms),
    )


def _changes(body: s.QueueSettingsBody, caller: Principal) -> dict[str, Any]:
    """The settings a request names: null turns a clearable one off, and is ignored
    for the others (as v2 always did)."""
    out: dict[str, Any] = {}
    for field in s.QueueSettingsBody.__struct_fields__:
        value = getattr(body, field)
        if value is msgspec.UNSET or (value is None and field not in s.CLEARABLE_SETTINGS):
            continue
        out[field] = msgspec.to_builtins(value)
    if isinstance(out.get("dead_letter_queue"), str):
        out["dead_letter_queue"] = caller.name_of(out["dead_letter_queue"])
    policy = (out.get("sqs_attributes") or {}).get("Policy")
    if policy:  # the queue's resource policy, as the SQS endpoint evaluates it
        try:
            parse(policy)
        except PolicyError as refused:
            raise Invalid(f"sqs_attributes.Policy: {refused}", "sqs_attributes") from None
    return out


def _page(
    request: web.Request, names: list[str], default: int = LIST_PAGE
) -> tuple[list[str], str | None]:
    """The page of ``names`` (sorted) the query asks for: those starting with ``prefix``,
    after the name ``after``, ``limit`` (``default``) at most; and the last one when
    more follow."""
    query = request.query
    prefix, after, limit = query.get("prefix", ""), query.get("after", ""), _limit(request, default)
    start = bisect.bisect_right(names, after) if after else 0
    chosen: list[str] = []
    for name in itertools.islice(names, start, None):
        if not name.startswith(prefix):
            if name > prefix:
                break  # sorted: no later name starts so
            continue
        if len(chosen) == limit:
            return chosen, chosen[-1]
        chosen.append(name)
    return chosen, None


def _limit(request: web.Request, default: int) -> int:
    """The page size the query asks for (``default`` when it does not)."""
    raw = request.query.get("limit", str(default))
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 6 and 0 < int(raw) <= MAX_LIST_PAGE):
        raise Invalid(f"limit is an integer from 1 to {MAX_LIST_PAGE}", "limit")
    return int(raw)


def _busiest(request: web.Request, names: list[str]) -> list[str]:
    """The page of ``names`` (the busiest first) the query asks for: those starting
    with ``prefix``, ``limit`` at most; one page (``after`` pages by name only)."""
    if "after" in request.query:
        raise Invalid("after pages by name: with order=busiest there is one page", "after")
    prefix = request.query.get("prefix", "")
    return [n for n in names if n.startswith(prefix)][: _limit(request, STATS_PAGE)]


async def list_queues(request: web.Request) -> web.Response:
    """List queues, a page at a time."""
    page, after = _page(request, who(request).visible(node(request).queue_names()))
    return json_response(s.QueueList(page, after))


async def create_queue(request: web.Request) -> web.Response:
    """Create a queue, with optional settings: 201, or 409 when it exists."""
    name, caller = queue_name(request), who(request)
    body = await read_json(request, s.QueueSettingsBody, optional=True)
    view = await node(request).create_queue(name, _changes(body, caller))
    return json_response(_info(view, caller), status=201)


async def get_queue(request: web.Request) -> web.Response:
    """Return a queue's settings and stats."""
    view = await node(request).describe_queue(queue_name(request))
    return json_response(_info(view, who(request)))


async def configure_queue(request: web.Request) -> web.Response:
    """Change some settings; validated, effective at once."""
    name, caller = queue_param(request), who(request)
    body = await read_json(request, s.QueueSettingsBody)
    view = await node(request).configure_queue(name, _changes(body, caller))
    return json_response(_info(view, caller))


async def delete_queue(request: web.Request) -> web.Response:
    """Delete a queue and its messages."""
    await node(request).delete_queue(queue_name(request))
    return json_response({"deleted": True})


async def purge_queue(request: web.Request) -> web.Response:
    """Drop every message published before the call."""
    return json_response(s.PurgeResponse(await node(request).purge_queue(queue_param(request))))


async def redrive(request: web.Request) -> web.Response:
    """Start moving a dead-letter queue's messages back: 202 with the task."""
    name = queue_param(request)
    caller = who(request)
    body = await read_json(request, s.RedriveRequest, optional=True)
    to = None if body.to is None else caller.name_of(body.to)
    view = await node(request).moves.redrive(name, to, body.max_per_second)
    return json_response(_redrive(view, caller), status=202)


def _redrive(view: RedriveView, caller: Principal) -> RedriveView:
    if view.to is not None:
        view.to = caller.shown(view.to)
    return view


async def redrive_status(request: web.Request) -> web.Response:
    """Return the latest redrive of a queue."""
    view = await node(request).moves.redrive_status(queue_param(request))
    return json_response(_redrive(view, who(request)))


async def cancel_redrive(request: web.Request) -> web.Response:
    """Cancel a running redrive; what it moved stays moved."""
    view = await node(request).moves.cancel_redrive(queue_param(request))
    return json_response(_redrive(view, who(request)))


# -- messages -----------------------------------------------------------------


async def _outgoing(request: web.Request) -> list[bytes | Outgoing]:
    return outgoing_batch(await read_json(request, s.PublishRequest))


def outgoing_batch(body: s.PublishRequest) -> list[bytes | Outgoing]:
    """What a publish request asks to store, message by message."""
    return [outgoing(m) for m in body.messages]


def published(ids: Published[int]) -> s.PublishResponse:
    """The answer to a publish: the ids in order, and which were duplicates."""
    return s.PublishResponse([str(i) for i in ids], ids.duplicate or None)


def receive_ask(
    here: Node, name: str, body: s.ReceiveRequest, caller: Principal
) -> tuple[ReceiveRequest, Callable[[list[Message]], s.ReceiveResponse]]:
    """What a receive request asks of the queue ``name``, and how its answer is made."""
    force, shown = body.encoding == "base64", caller.shown

    def render(messages: list[Message]) -> s.ReceiveResponse:
        return s.ReceiveResponse([encode_message(m, force, shown) for m in messages])

    wait = here.wait_of(name, body.wait_seconds)
    return ReceiveRequest(name, body.max_messages, body.visibility_timeout, wait), render


async def deleted(here: Node, name: str, body: s.DeleteRequest) -> s.DeleteResponse:
    """Delete a batch of ids from the queue ``name``; say which existed."""
    existed = await here.delete(name, [parse_id(t) for t in body.ids])
    return s.DeleteResponse(*_split(body.ids, existed))


async def publish(request: web.Request) -> web.Response:
    """Publish a batch; 200 with the ids once every message is durable."""
    name = queue_param(request)
    return json_response(published(await node(request).publish(name, await _outgoing(request))))


async def receive(request: web.Request) -> web.Response:
    """Lease up to ``max_messages``, waiting up to ``wait_seconds`` for one to arrive."""
    name = queue_param(request)
    body = await read_json(request, s.ReceiveRequest, optional=True)
    ask, render = receive_ask(node(request), name, body, who(request))
    return await deliver(request, ask, lambda messages: json_response(render(messages)))


async def delete(request: web.Request) -> web.Response:
    """Delete a batch of ids; say which existed."""
    name = queue_param(request)
    body = await read_json(request, s.DeleteRequest)
    return json_response(await deleted(node(request), name, body))


async def change_visibility(request: web.Request) -> web.Response:
    """Extend leases (keep working on a batch) or end them (give messages back now)."""
    name = queue_param(request)
    body = await read_json(request, s.VisibilityRequest)
    ids = [parse_id(t) for t in body.ids]
    changed = set(await node(request).change_visibility(name, ids, body.visibility_timeout))
    return json_response(s.VisibilityResponse(*_split(body.ids, [i in changed for i in ids])))


async def peek(request: web.Request) -> web.Response:
    """Read one message without leasing it."""
    name = queue_param(request)
    message = await node(request).peek(name, parse_id(request.match_info["id"]))
    return json_response(s.PeekResponse(encode_message(message, shown=who(request).shown)))


async def peek_many(request: web.Request) -> web.Response:
    """Return the oldest messages (``?max=``, default 10) without leasing them."""
    name = queue_param(request)
    raw = request.query.get("max", "10")
    count = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 9 else 0
    messages = await node(request).peek_many(name, count)
    shown = who(request).shown
    return json_response(s.ReceiveResponse([encode_message(m, shown=shown) for m in messages]))


def _split(texts: list[str], flags: list[bool]) -> tuple[list[str], list[str]]:
    """Return the texts whose flag is set, then the others."""
    return (
        [t for t, ok in zip(texts, flags, strict=True) if ok],
        [t for t, ok in zip(texts, flags, strict=True) if not ok],
    )


# -- stats and status ---------------------------------------------------------


async def queue_stats(request: web.Request) -> web.Response:
    """Return a queue's contents, oldest message age and rates, cluster-wide."""
    (detail,) = await node(request).queue_stats([queue_name(request)])
    detail.queue = who(request).shown(detail.queue)
    return json_response(detail)


async def node_stats(request: web.Request) -> web.Response:
    """Return a page of queues' stats (by name: ``prefix``, ``after``, ``limit``; or with
    ``order=busiest`` the queues in use, the busiest first) and sums: over every queue
    where the store counts them and the caller sees them all, else the page's."""
    here = node(request)
    caller = who(request)
    order = request.query.get("order", "name")
    if order == "busiest":
        page, after = _busiest(request, caller.visible(here.busiest_queue_names())), None
    elif order == "name":
        page, after = _page(request, caller.visible(here.queue_names()), STATS_PAGE)
    else:
        raise Invalid("order is name or busiest", "order")
    # Sums over every queue for a caller who sees them all and asked for no part of them
    every = caller.application is None and not request.query.get("prefix")
    stats = await here.node_stats([caller.name_of(name) for name in page], after, every)
    for detail in stats.queues:
        detail.queue = caller.shown(detail.queue)
    return json_response(stats)


async def status(request: web.Request) -> web.Response:
    """Return this node, what it serves now, and every node it heard of with state and slice."""
    return json_response(await node(request).status())


# -- topics -------------------------------------------------------------------


async def list_topics(request: web.Request) -> web.Response:
    """List topics, a page at a time."""
    page, after = _page(request, who(request).visible(node(request).topic_names()))
    return json_response(s.TopicList(page, after))


def _topic(request: web.Request, name: str, subscribers: Subscribers | None) -> s.TopicInfo:
    """A topic with a page of its subscriptions: the query's ``after`` and ``limit``
    (1,000 by default), and ``next`` when more follow. Webhooks are listed as such
    (``api.webhooks``)."""
    caller = who(request)
    page, after = ([], None) if subscribers is None else _subscriptions(request, subscribers)
    listed = [
        s.SubscriptionInfo(
            caller.shown(sub.queue), sub.pattern, sub.filter, sub.envelope, sub.filter_scope
        )
        for sub in page
    ]
    next_page = None if after is None else caller.shown(after)
    return s.TopicInfo(caller.shown(name), [sub.queue for sub in listed], listed, next_page)


def _subscriptions(
    request: web.Request, subscribers: Subscribers
) -> tuple[list[SubscriptionView], str | None]:
    after = request.query.get("after", "")
    if after:
        after = who(request).name_of(after)
    return subscribers.page(after, _limit(request, LIST_PAGE), pushes=False)


async def create_topic(request: web.Request) -> web.Response:
    """Create a topic: 201, or 409 when it exists."""
    name = topic_name(request)
    await node(request).create_topic(name)
    return json_response(_topic(request, name, None), status=201)


async def get_topic(request: web.Request) -> web.Response:
    """Return a topic and a page of its subscriptions."""
    name = topic_name(request)
    return json_response(_topic(request, name, node(request).subscribed(name)))


async def delete_topic(request: web.Request) -> web.Response:
    """Delete a topic (its queues stay)."""
    await node(request).delete_topic(topic_name(request))
    return json_response({"deleted": True})


async def subscribe(request: web.Request) -> web.Response:
    """Subscribe a queue to a topic, or change what it takes (idempotent)."""
    topic = topic_name(request)
    node(request).require_topic(topic)  # 404s before the body is read
    queue = queue_param(request)
    body = await read_json(request, s.SubscriptionBody, optional=True)
    try:
        subscriptions = await node(request).subscribe(
            topic, queue, body.pattern, body.filter, filter_scope=body.filter_scope
        )
    except Invalid as refused:
        if refused.field not in ("filter", "filter_scope"):
            raise
        raise Invalid(f"{refused.field}: {refused}", refused.field) from None
    return json_response(_topic(request, topic, subscriptions))


async def unsubscribe(request: web.Request) -> web.Response:
    """Unsubscribe a queue (idempotent)."""
    topic, queue = topic_name(request), queue_name(request)
    remaining = await node(request).unsubscribe(topic, queue)
    return json_response(_topic(request, topic, remaining))


async def publish_topic(request: web.Request) -> web.Response:
    """Publish a batch to the subscribers that take each message; ids per queue."""
    name, shown = topic_name(request), who(request).shown
    node(request).require_topic(name)
    sent = await node(request).publish_topic(name, await _outgoing(request))
    spelled: dict[int, list[str | None]] = {}
    return json_response(
        s.TopicPublishResponse(
            {shown(q): _texts(v, spelled) for q, v in sent.ids.items()},
            {shown(q): v for q, v in sent.duplicate.items()} or None,
        )
    )


def _texts(ids: list[int | None], spelled: dict[int, list[str | None]]) -> list[str | None]:
    """Ids as the wire spells them: a broadcast's one id per queue the short way, spelled
    once for all the queues whose copies share it (kept in ``spelled``)."""
    if len(ids) == 1 and (mid := ids[0]) is not None:
        text = spelled.get(mid)
        if text is None:
            text = spelled[mid] = [str(mid)]
        return text
    return [None if i is None else str(i) for i in ids]
