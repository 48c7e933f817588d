"""The v2 JSON batch API: publish many, receive with long polling, delete many."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dynamiq.api.bodies import decode_body, encode_message, json_response, read_json
from dynamiq.api.context import SERVICES, Services
from dynamiq.api.openapi import openapi_document
from dynamiq.api.schemas import (
    DeleteRequest,
    DeleteResponse,
    Member,
    NodeStats,
    PeekResponse,
    PublishRequest,
    PublishResponse,
    QueueInfo,
    QueueList,
    QueueSettingsBody,
    QueueStatsBody,
    QueueStatsDetail,
    Rates,
    ReceiveRequest,
    ReceiveResponse,
    Status,
    TopicInfo,
    TopicList,
    TopicPublishResponse,
    Totals,
    VisibilityRequest,
    VisibilityResponse,
)
from dynamiq.cluster.base import Member as ClusterMember
from dynamiq.errors import Invalid
from dynamiq.models import QueueSettings, parse_id

__all__ = ["routes"]


def routes() -> list[web.RouteDef]:
    """Return the v2 route table."""
    return [
        web.get("/v2/openapi.json", openapi),
        web.get("/v2/queues", list_queues),
        web.put("/v2/queues/{queue}", create_queue),
        web.get("/v2/queues/{queue}", get_queue),
        web.patch("/v2/queues/{queue}", configure_queue),
        web.delete("/v2/queues/{queue}", delete_queue),
        web.post("/v2/queues/{queue}/messages", publish),
        web.get("/v2/queues/{queue}/messages/{id}", peek),
        web.post("/v2/queues/{queue}/receive", receive),
        web.post("/v2/queues/{queue}/delete", delete),
        web.post("/v2/queues/{queue}/visibility", change_visibility),
        web.get("/v2/queues/{queue}/stats", queue_stats),
        web.get("/v2/queues/{queue}/peek", peek_many),
        web.get("/v2/stats", node_stats),
        web.get("/v2/status", status),
        web.get("/v2/topics", list_topics),
        web.put("/v2/topics/{topic}", create_topic),
        web.get("/v2/topics/{topic}", get_topic),
        web.delete("/v2/topics/{topic}", delete_topic),
        web.put("/v2/topics/{topic}/subscriptions/{queue}", subscribe),
        web.delete("/v2/topics/{topic}/subscriptions/{queue}", unsubscribe),
        web.post("/v2/topics/{topic}/messages", publish_topic),
    ]


async def openapi(request: web.Request) -> web.Response:
    """Serve the OpenAPI document of this API."""
    return json_response(openapi_document())


# -- queues -------------------------------------------------------------------


async def _queue_info(svc: Services, name: str) -> QueueInfo:
    record = svc.catalog.queue(name)
    stats = await svc.queues.stats(name)
    return QueueInfo(
        name=name,
        settings=QueueSettingsBody(**record.settings.to_dict()),
        stats=QueueStatsBody(stats.depth, stats.in_flight, stats.partitions),
    )


def _changes(body: QueueSettingsBody) -> dict[str, Any]:
    fields = QueueSettingsBody.__struct_fields__
    return {f: getattr(body, f) for f in fields if getattr(body, f) is not None}


async def list_queues(request: web.Request) -> web.Response:
    """List queues."""
    return json_response(QueueList(request.app[SERVICES].catalog.queues()))


async def create_queue(request: web.Request) -> web.Response:
    """Create a queue, with optional settings: 201, or 409 when it exists."""
    svc = request.app[SERVICES]
    body = await read_json(request, QueueSettingsBody, optional=True)
    settings = QueueSettings().updated(_changes(body))
    name = request.match_info["queue"]
    await svc.catalog.create_queue(name, settings)
    return json_response(await _queue_info(svc, name), status=201)


async def get_queue(request: web.Request) -> web.Response:
    """Return a queue's settings and stats."""
    svc = request.app[SERVICES]
    return json_response(await _queue_info(svc, request.match_info["queue"]))


async def configure_queue(request: web.Request) -> web.Response:
    """Change some settings; validated, effective at once."""
    svc = request.app[SERVICES]
    name = request.match_info["queue"]
    svc.catalog.queue(name)
    body = await read_json(request, QueueSettingsBody)
    await svc.catalog.configure_queue(name, _changes(body))
    return json_response(await _queue_info(svc, name))


async def delete_queue(request: web.Request) -> web.Response:
    """Delete a queue and its messages."""
    await request.app[SERVICES].delete_queue(request.match_info["queue"])
    return json_response({"deleted": True})


# -- messages -----------------------------------------------------------------


async def publish(request: web.Request) -> web.Response:
    """Publish a batch; 200 with the ids once every message is durable."""
    svc = request.app[SERVICES]
    name = request.match_info["queue"]
    svc.catalog.queue(name)
    ids = await svc.queues.publish(name, await _bodies(request, svc))
    return json_response(PublishResponse([str(i) for i in ids]))


async def receive(request: web.Request) -> web.Response:
    """Lease up to ``max_messages``, waiting up to ``wait_seconds`` for one to arrive."""
    svc = request.app[SERVICES]
    name = request.match_info["queue"]
    svc.catalog.queue(name)
    body = await read_json(request, ReceiveRequest, optional=True)
    _check_batch(body.max_messages, svc.limits.maxbatch)
    if body.wait_seconds > svc.limits.maxwaitseconds:
        raise Invalid(f"wait_seconds must be <= {svc.limits.maxwaitseconds:g}", "wait_seconds")
    messages = await svc.coordinator.receive(
        name, body.max_messages, body.visibility_timeout, body.wait_seconds
    )
    force = body.encoding == "base64"
    return json_response(ReceiveResponse([encode_message(m, force) for m in messages]))


async def delete(request: web.Request) -> web.Response:
    """Delete a batch of ids; say which existed."""
    svc = request.app[SERVICES]
    name = request.match_info["queue"]
    svc.catalog.queue(name)
    body = await read_json(request, DeleteRequest)
    existed = await svc.coordinator.delete(name, _ids(body.ids, svc))
    return json_response(DeleteResponse(*_split(body.ids, existed)))


async def change_visibility(request: web.Request) -> web.Response:
    """Extend leases (keep working on a batch) or end them (give messages back now)."""
    svc = request.app[SERVICES]
    name = request.match_info["queue"]
    svc.catalog.queue(name)
    body = await read_json(request, VisibilityRequest)
    ids = _ids(body.ids, svc)
    changed = set(await svc.coordinator.change_visibility(name, ids, body.visibility_timeout))
    return json_response(VisibilityResponse(*_split(body.ids, [i in changed for i in ids])))


async def peek(request: web.Request) -> web.Response:
    """Read one message without leasing it."""
    svc = request.app[SERVICES]
    name = request.match_info["queue"]
    svc.catalog.queue(name)
    message = await svc.queues.peek(name, parse_id(request.match_info["id"]))
    return json_response(PeekResponse(encode_message(message)))


async def _bodies(request: web.Request, svc: Services) -> list[bytes]:
    body = await read_json(request, PublishRequest)
    _check_batch(len(body.messages), svc.limits.maxbatch)
    return [decode_body(m) for m in body.messages]


async def _details(svc: Services, names: list[str]) -> list[QueueStatsDetail]:
    """Return each queue's stats cluster-wide: leases and rates of every live node summed."""
    peers = await svc.coordinator.peer_stats(names)
    out = []
    for name in names:
        st = await svc.queues.stats(name, detailed=True)
        in_flight, publish, receive, delete = peers.get(name, (0, 0.0, 0.0, 0.0))
        in_flight += st.in_flight
        rates = Rates(st.publish_rate + publish, st.receive_rate + receive, st.delete_rate + delete)
        visible = max(0, st.depth - in_flight)
        out.append(
            QueueStatsDetail(
                name, visible, in_flight, st.depth, st.oldest_age, rates, st.partitions
            )
        )
    return out


async def peek_many(request: web.Request) -> web.Response:
    """Return the oldest messages (``?max=``, default 10) without leasing them."""
    svc = request.app[SERVICES]
    name = request.match_info["queue"]
    svc.catalog.queue(name)
    raw = request.query.get("max", "10")
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= svc.limits.maxbatch:
        raise Invalid(f"max must be an integer from 1 to {svc.limits.maxbatch}", field="max")
    messages = await svc.queues.peek_many(name, int(raw))
    return json_response(ReceiveResponse([encode_message(m) for m in messages]))


async def status(request: web.Request) -> web.Response:
    """Return this node, what it serves now, and every member it heard of with state and slice."""
    svc = request.app[SERVICES]
    membership = svc.membership
    live = {m.name for m in membership.members()}

    def member(m: ClusterMember, state: str) -> Member:
        if state in ("online", "suspect") and m.name in live:
            lo, hi = membership.slice_of(m.name)
            return Member(m.name, m.http, state, [str(lo), str(hi)])
        return Member(m.name, m.http, state, [])

    members = [member(s.member, s.state) for s in membership.states()]
    serving = svc.queues.keyspace
    return json_response(
        Status(
            membership.local().name,
            members,
            [str(serving[0]), str(serving[1])] if serving else [],
        )
    )


async def queue_stats(request: web.Request) -> web.Response:
    """Return a queue's contents, oldest message age and rates."""
    svc = request.app[SERVICES]
    name = request.match_info["queue"]
    svc.catalog.queue(name)
    return json_response((await _details(svc, [name]))[0])


async def node_stats(request: web.Request) -> web.Response:
    """Return every queue's stats and their sums."""
    svc = request.app[SERVICES]
    queues = await _details(svc, svc.catalog.queues())
    totals = Totals(
        visible=sum(q.visible for q in queues),
        in_flight=sum(q.in_flight for q in queues),
        depth=sum(q.depth for q in queues),
        rates=Rates(
            publish=sum(q.rates.publish for q in queues),
            receive=sum(q.rates.receive for q in queues),
            delete=sum(q.rates.delete for q in queues),
        ),
    )
    membership = svc.membership
    return json_response(
        NodeStats(membership.local().name, len(membership.members()), queues, totals)
    )


def _ids(texts: list[str], svc: Services) -> list[int]:
    _check_batch(len(texts), svc.limits.maxbatch)
    return [parse_id(t) for t in texts]


def _split(texts: list[str], flags: list[bool]) -> tuple[list[str], list[str]]:
    """Return the texts whose flag is set, then the others."""
    return (
        [t for t, ok in zip(texts, flags, strict=True) if ok],
        [t for t, ok in zip(texts, flags, strict=True) if not ok],
    )


def _check_batch(size: int, limit: int) -> None:
    if size > limit:
        raise Invalid(f"at most {limit} messages per request", field="batch")


# -- topics -------------------------------------------------------------------


async def list_topics(request: web.Request) -> web.Response:
    """List topics."""
    return json_response(TopicList(request.app[SERVICES].catalog.topics()))


async def create_topic(request: web.Request) -> web.Response:
    """Create a topic: 201, or 409 when it exists."""
    catalog = request.app[SERVICES].catalog
    name = request.match_info["topic"]
    await catalog.create_topic(name)
    return json_response(TopicInfo(name, []), status=201)


async def get_topic(request: web.Request) -> web.Response:
    """Return a topic and its subscribers."""
    name = request.match_info["topic"]
    return json_response(TopicInfo(name, request.app[SERVICES].catalog.topic(name)))


async def delete_topic(request: web.Request) -> web.Response:
    """Delete a topic (its queues stay)."""
    await request.app[SERVICES].catalog.delete_topic(request.match_info["topic"])
    return json_response({"deleted": True})


async def subscribe(request: web.Request) -> web.Response:
    """Subscribe a queue to a topic (idempotent)."""
    topic, queue = request.match_info["topic"], request.match_info["queue"]
    queues = await request.app[SERVICES].catalog.subscribe(topic, queue)
    return json_response(TopicInfo(topic, queues))


async def unsubscribe(request: web.Request) -> web.Response:
    """Unsubscribe a queue (idempotent)."""
    topic, queue = request.match_info["topic"], request.match_info["queue"]
    queues = await request.app[SERVICES].catalog.unsubscribe(topic, queue)
    return json_response(TopicInfo(topic, queues))


async def publish_topic(request: web.Request) -> web.Response:
    """Publish a batch to every subscriber; ids per queue."""
    svc = request.app[SERVICES]
    name = request.match_info["topic"]
    svc.catalog.topic(name)
    ids = await svc.topics.publish(name, await _bodies(request, svc))
    return json_response(TopicPublishResponse({q: [str(i) for i in v] for q, v in ids.items()}))
