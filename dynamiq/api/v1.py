"""The original Dynamiq's v1 routes: same paths, statuses and body shapes, its bugs fixed.

Bodies are raw bytes on the way in; on the way out v1 gives them as JSON text,
with invalid UTF-8 replaced by U+FFFD (use v2 for binary payloads).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from dynamiq.api.bodies import json_response
from dynamiq.api.context import SERVICES
from dynamiq.errors import BadRequest, Invalid, NotFound, QueueNotFound
from dynamiq.models import Message, parse_id

__all__ = ["routes"]


def routes() -> list[web.RouteDef]:
    """Return the v1 route table."""
    return [
        web.get("/v1/status/servers", servers),
        web.get("/v1/status/partitionrange", partition_range),
        web.get("/v1/topics", list_topics),
        web.put("/v1/topics/{topic}", create_topic),
        web.get("/v1/topics/{topic}", get_topic),
        web.delete("/v1/topics/{topic}", delete_topic),
        web.put("/v1/topics/{topic}/queues/{queue}", subscribe),
        web.delete("/v1/topics/{topic}/queues/{queue}", unsubscribe),
        web.put("/v1/topics/{topic}/message", publish_topic),
        web.get("/v1/queues", list_queues),
        web.put("/v1/queues/{queue}", create_queue),
        web.get("/v1/queues/{queue}", get_queue),
        web.patch("/v1/queues/{queue}", configure_queue),
        web.delete("/v1/queues/{queue}", delete_queue),
        web.put("/v1/queues/{queue}/message", publish),
        web.get("/v1/queues/{queue}/message/{id}", peek),
        web.delete("/v1/queues/{queue}/message/{id}", delete_message),
        web.get("/v1/queues/{queue}/messages/{batch}", receive),
        web.delete("/v1/queues/{queue}/messages/{ids}", delete_messages),
    ]


def _text(message: Message) -> dict[str, str]:
    return {"id": str(message.id), "body": message.body.decode(errors="replace")}


# -- status -------------------------------------------------------------------


async def servers(request: web.Request) -> web.Response:
    """List the live members, one ``Member: <name> <ip>`` line each."""
    members = request.app[SERVICES].membership.members()
    return web.Response(text="".join(f"Member: {m.name} {m.host}\n" for m in members))


async def partition_range(request: web.Request) -> web.Response:
    """Return this node's slice of the id keyspace as decimal strings."""
    membership = request.app[SERVICES].membership
    lo, hi = membership.slice_of(membership.local().name)
    return json_response({"bottom": str(lo), "top": str(hi)})


# -- topics -------------------------------------------------------------------


async def list_topics(request: web.Request) -> web.Response:
    """List topics."""
    return json_response({"topics": request.app[SERVICES].catalog.topics()})


async def create_topic(request: web.Request) -> web.Response:
    """Create a topic: 201, or 422 when it exists."""
    catalog = request.app[SERVICES].catalog
    await catalog.create_topic(request.match_info["topic"])
    return json_response({"Queues": []}, status=201)


async def get_topic(request: web.Request) -> web.Response:
    """Return a topic's subscribers."""
    catalog = request.app[SERVICES].catalog
    return json_response({"Queues": catalog.topic(request.match_info["topic"])})


async def delete_topic(request: web.Request) -> web.Response:
    """Delete a topic."""
    await request.app[SERVICES].catalog.delete_topic(request.match_info["topic"])
    return json_response({"Deleted": True})


async def subscribe(request: web.Request) -> web.Response:
    """Subscribe a queue; both must exist (422 otherwise, as the original)."""
    catalog = request.app[SERVICES].catalog
    topic, queue = request.match_info["topic"], request.match_info["queue"]
    try:
        subscribers = await catalog.subscribe(topic, queue)
    except NotFound as exc:
        kind = "Queue" if isinstance(exc, QueueNotFound) else "Topic"
        name = queue if kind == "Queue" else topic
        raise Invalid(f"{kind} {name} does not exist. Please create it first.") from None
    return json_response({"Queues": subscribers})


async def unsubscribe(request: web.Request) -> web.Response:
    """Unsubscribe a queue; return the remaining subscribers."""
    catalog = request.app[SERVICES].catalog
    remaining = await catalog.unsubscribe(request.match_info["topic"], request.match_info["queue"])
    return json_response({"Queues": remaining})


async def publish_topic(request: web.Request) -> web.Response:
    """Publish the raw body to every subscriber: ``{queue: id}``."""
    svc = request.app[SERVICES]
    ids = await svc.topics.publish(request.match_info["topic"], [await request.read()])
    return json_response({queue: str(mids[0]) for queue, mids in ids.items()})


# -- queues -------------------------------------------------------------------


async def list_queues(request: web.Request) -> web.Response:
    """List queues."""
    return json_response({"queues": request.app[SERVICES].catalog.queues()})


async def create_queue(request: web.Request) -> web.Response:
    """Create a queue with default settings: 201 ``"created"``."""
    await request.app[SERVICES].catalog.create_queue(request.match_info["queue"])
    return json_response("created", status=201)


async def get_queue(request: web.Request) -> web.Response:
    """Return a queue's settings and its partition count."""
    svc = request.app[SERVICES]
    name = request.match_info["queue"]
    try:
        record = svc.catalog.queue(name)
    except QueueNotFound:
        return json_response(f"There is no queue named {name}", status=404)
    stats = await svc.queues.stats(name)
    return json_response({**record.settings.to_dict(), "partitions": stats.partitions})


async def configure_queue(request: web.Request) -> web.Response:
    """Change settings from a JSON object; validated, effective at once."""
    svc = request.app[SERVICES]
    name = request.match_info["queue"]
    svc.catalog.queue(name)
    changes = await _json_object(request)
    await svc.catalog.configure_queue(name, changes)
    return json_response("ok")


async def delete_queue(request: web.Request) -> web.Response:
    """Delete a queue and its messages."""
    await request.app[SERVICES].delete_queue(request.match_info["queue"])
    return json_response({"Deleted": True})


# -- messages -----------------------------------------------------------------


async def publish(request: web.Request) -> web.Response:
    """Publish the raw body; the id comes back as raw text once it is durable."""
    svc = request.app[SERVICES]
    (message_id,) = await svc.queues.publish(request.match_info["queue"], [await request.read()])
    return web.Response(text=str(message_id))


async def peek(request: web.Request) -> web.Response:
    """Read one message by id without leasing it."""
    svc = request.app[SERVICES]
    name = request.match_info["queue"]
    svc.catalog.queue(name)
    message = await svc.queues.peek(name, parse_id(request.match_info["id"]))
    return json_response({"messages": [_text(message)]})


async def receive(request: web.Request) -> web.Response:
    """Lease up to ``batch`` messages: ``[{"id", "body"}, ...]``."""
    svc = request.app[SERVICES]
    name = request.match_info["queue"]
    svc.catalog.queue(name)
    batch = _batch_size(request.match_info["batch"], svc.limits.maxbatch)
    messages = await svc.coordinator.receive(name, batch)
    return json_response([_text(m) for m in messages])


async def delete_message(request: web.Request) -> web.Response:
    """Delete one message: ``true`` if it existed, ``false`` if not."""
    svc = request.app[SERVICES]
    name = request.match_info["queue"]
    svc.catalog.queue(name)
    (existed,) = await svc.coordinator.delete(name, [parse_id(request.match_info["id"])])
    return json_response(existed)


async def delete_messages(request: web.Request) -> web.Response:
    """Delete comma-separated ids: ``{"deleted": n}`` counting those that existed."""
    svc = request.app[SERVICES]
    name = request.match_info["queue"]
    svc.catalog.queue(name)
    parts = request.match_info["ids"].split(",")
    if len(parts) > svc.limits.maxbatch:
        raise Invalid(f"at most {svc.limits.maxbatch} ids per request", field="ids")
    ids = [parse_id(p.strip()) for p in parts]
    existed = await svc.coordinator.delete(name, ids)
    return json_response({"deleted": sum(existed)})


def _batch_size(text: str, limit: int) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= limit:
        raise Invalid(f"batch size must be an integer from 1 to {limit}", field="batchSize")
    return int(text)


async def _json_object(request: web.Request) -> dict[str, Any]:
    try:
        data = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("the body must be a JSON object") from None
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    return data
