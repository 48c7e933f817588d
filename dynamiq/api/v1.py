"""The original Dynamiq's v1 routes: same paths, statuses and body shapes, its bugs fixed.

Bodies are raw bytes on the way in; on the way out v1 gives them as JSON text,
with invalid UTF-8 replaced by U+FFFD (use v2 for binary payloads). The API
is a sub-application mounted at ``/v1`` with the original's error shape.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import web

from dynamiq.access.roles import Access
from dynamiq.api.bodies import json_response
from dynamiq.api.delivery import deliver
from dynamiq.api.errors import error_middleware, render_v1
from dynamiq.api.routes import Route, node, queue_name, queue_param, route_defs, topic_name, who
from dynamiq.errors import BadRequest, Invalid, NotFound, QueueNotFound
from dynamiq.keyspace import node_of
from dynamiq.models import Message, ReceiveRequest, parse_id
from dynamiq.service.reports import Subscribers, live_nodes, node_slice

__all__ = ["ROUTES", "application"]

log = logging.getLogger("dynamiq.api")

# The original's final version spells the settings in PascalCase, earlier
# ones in snake_case: a queue is described with both.
_PASCAL = {
    "visibility_timeout": "VisibilityTimeout",
    "min_partitions": "MinPartitions",
    "max_partitions": "MaxPartitions",
    "max_partition_age": "MaxPartitionAge",
    "compressed_messages": "CompressedMessages",
}


def _text(message: Message) -> dict[str, str]:
    return {"id": str(message.id), "body": message.body.decode(errors="replace")}


# -- status -------------------------------------------------------------------


async def servers(request: web.Request) -> web.Response:
    """List the live nodes, one ``Member: <name> <ip>`` line each."""
    nodes = live_nodes(node(request).membership)
    return web.Response(text="".join(f"Member: {node_of(m.name)} {m.host}\n" for m in nodes))


async def partition_range(request: web.Request) -> web.Response:
    """Return this node's slice of the id keyspace as decimal strings."""
    lo, hi = node_slice(node(request).membership)
    return json_response({"bottom": str(lo), "top": str(hi)})


# -- topics -------------------------------------------------------------------


async def list_topics(request: web.Request) -> web.Response:
    """List topics."""
    return json_response({"topics": who(request).visible(node(request).topic_names())})


async def create_topic(request: web.Request) -> web.Response:
    """Create a topic: 201, or 422 when it exists."""
    await node(request).create_topic(topic_name(request))
    return json_response({"Queues": []}, status=201)


async def get_topic(request: web.Request) -> web.Response:
    """Return a topic's subscribers."""
    subscribers = node(request).subscribers(topic_name(request))
    return json_response({"Queues": [who(request).shown(q) for q in subscribers]})


async def delete_topic(request: web.Request) -> web.Response:
    """Delete a topic."""
    await node(request).delete_topic(topic_name(request))
    return json_response({"Deleted": True})


async def subscribe(request: web.Request) -> web.Response:
    """Subscribe a queue; both must exist (422 otherwise, as the original)."""
    topic, queue = topic_name(request), queue_name(request)
    try:
        subscriptions = await node(request).subscribe(topic, queue, keep=True)
    except NotFound as exc:
        kind, name = (
            ("Queue", request.match_info["queue"])
            if isinstance(exc, QueueNotFound)
            else ("Topic", request.match_info["topic"])
        )
        raise Invalid(f"{kind} {name} does not exist. Please create it first.") from None
    return json_response({"Queues": _shown(request, subscriptions)})


async def unsubscribe(request: web.Request) -> web.Response:
    """Unsubscribe a queue; return the remaining subscribers."""
    topic, queue = topic_name(request), queue_name(request)
    remaining = await node(request).unsubscribe(topic, queue)
    return json_response({"Queues": _shown(request, remaining)})


def _shown(request: web.Request, subscribers: Subscribers) -> list[str]:
    """Every subscribed queue, as the caller knows it (the original answers them all)."""
    shown = who(request).shown
    return [shown(queue) for queue in subscribers.queues()]


async def publish_topic(request: web.Request) -> web.Response:
    """Publish the raw body to every subscriber that takes it: ``{queue: id}``."""
    published = await node(request).publish_topic(topic_name(request), [await request.read()])
    shown = who(request).shown
    return json_response({shown(queue): str(mid) for queue, (mid,) in published.ids.items()})


# -- queues -------------------------------------------------------------------


async def list_queues(request: web.Request) -> web.Response:
    """List queues."""
    return json_response({"queues": who(request).visible(node(request).queue_names())})


async def create_queue(request: web.Request) -> web.Response:
    """Create a queue with default settings: 201 ``"created"``."""
    await node(request).create_queue(queue_name(request))
    return json_response("created", status=201)


async def get_queue(request: web.Request) -> web.Response:
    """Return a queue's settings, in both spellings, and its partition count."""
    view = await node(request).describe_queue(queue_name(request))
    # The original's settings only: the lifecycle's are v2's.
    settings = {k: v for k, v in view.settings.to_dict().items() if k in _PASCAL}
    pascal = {_PASCAL[key]: value for key, value in settings.items()}
    return json_response({**settings, **pascal, "partitions": view.stats.partitions})


async def configure_queue(request: web.Request) -> web.Response:
    """Change settings from a JSON object; validated, effective at once.

    Unknown keys are ignored, as the original's JSON decoding did (its
    client's own example misspells one); the known ones are applied.
    """
    name = queue_param(request)
    changes = await _json_object(request)
    known = {key: value for key, value in changes.items() if key in _PASCAL}
    if len(known) < len(changes):
        log.debug("v1 PATCH %s: ignored unknown keys %s", name, sorted(set(changes) - set(known)))
    await node(request).configure_queue(name, known)
    return json_response("ok")


async def delete_queue(request: web.Request) -> web.Response:
    """Delete a queue and its messages."""
    await node(request).delete_queue(queue_name(request))
    return json_response({"Deleted": True})


# -- messages -----------------------------------------------------------------


async def publish(request: web.Request) -> web.Response:
    """Publish the raw body; the id comes back as raw text once it is durable."""
    (message_id,) = await node(request).publish(queue_name(request), [await request.read()])
    return web.Response(text=str(message_id))


async def peek(request: web.Request) -> web.Response:
    """Read one message by id without leasing it."""
    name = queue_param(request)
    message = await node(request).peek(name, parse_id(request.match_info["id"]))
    return json_response({"messages": [_text(message)]})


async def receive(request: web.Request) -> web.Response:
    """Lease up to ``batch`` messages: ``[{"id", "body"}, ...]``."""
    name = queue_param(request)
    batch = _batch_size(request.match_info["batch"], node(request).limits.maxbatch)

    def render(messages: list[Message]) -> web.Response:
        return json_response([_text(m) for m in messages])

    return await deliver(request, ReceiveRequest(name, batch), render)


async def delete_message(request: web.Request) -> web.Response:
    """Delete one message: ``true`` if it existed, ``false`` if not."""
    name = queue_param(request)
    (existed,) = await node(request).delete(name, [parse_id(request.match_info["id"])])
    return json_response(existed)


async def delete_messages(request: web.Request) -> web.Response:
    """Delete comma-separated ids: ``{"deleted": n}`` counting those that existed."""
    name = queue_param(request)
    parts = request.match_info["ids"].split(",")
    limit = node(request).limits.maxbatch
    if len(parts) > limit:
        raise Invalid(f"at most {limit} ids per request", field="ids")
    existed = await node(request).delete(name, [parse_id(p.strip()) for p in parts])
    return json_response({"deleted": sum(existed)})


def _batch_size(text: str, limit: int) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= 9) or not 1 <= int(text) <= limit:
        raise Invalid(f"batch size must be an integer from 1 to {limit}", field="batchSize")
    return int(text)


async def _json_object(request: web.Request) -> dict[str, Any]:
    try:
        data = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadRequest("the body must be a JSON object") from None
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    return data


ROUTES: tuple[Route, ...] = (
    Route("GET", "/status/servers", servers, access=Access.READ),
    Route("GET", "/status/partitionrange", partition_range, access=Access.READ),
    Route("GET", "/topics", list_topics, access=Access.READ),
    Route("PUT", "/topics/{topic}", create_topic, access=Access.MANAGE),
    Route("GET", "/topics/{topic}", get_topic, access=Access.READ),
    Route("DELETE", "/topics/{topic}", delete_topic, access=Access.MANAGE),
    Route("PUT", "/topics/{topic}/queues/{queue}", subscribe, access=Access.MANAGE),
    Route("DELETE", "/topics/{topic}/queues/{queue}", unsubscribe, access=Access.MANAGE),
    Route("PUT", "/topics/{topic}/message", publish_topic, access=Access.PRODUCE),
    Route("GET", "/queues", list_queues, access=Access.READ),
    Route("PUT", "/queues/{queue}", create_queue, access=Access.MANAGE),
    Route("GET", "/queues/{queue}", get_queue, access=Access.READ),
    Route("PATCH", "/queues/{queue}", configure_queue, access=Access.MANAGE),
    Route("DELETE", "/queues/{queue}", delete_queue, access=Access.MANAGE),
    Route("PUT", "/queues/{queue}/message", publish, access=Access.PRODUCE),
    Route("GET", "/queues/{queue}/message/{id}", peek, access=Access.CONSUME),
    Route("DELETE", "/queues/{queue}/message/{id}", delete_message, access=Access.CONSUME),
    Route("GET", "/queues/{queue}/messages/{batch}", receive, access=Access.CONSUME),
    Route("DELETE", "/queues/{queue}/messages/{ids}", delete_messages, access=Access.CONSUME),
)


def application() -> web.Application:
    """Return the v1 API as a sub-application (mounted at ``/v1``) with its own error shape."""
    app = web.Application(middlewares=[error_middleware(render_v1)])
    app.add_routes(route_defs(ROUTES, api="v1"))
    return app
