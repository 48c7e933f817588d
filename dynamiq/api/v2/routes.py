"""The v2 JSON batch API: publish many, receive with long polling, delete many.

``ROUTES`` is the whole API, one row per route; aiohttp's table and the
OpenAPI document are both made from it.
"""

from __future__ import annotations

from aiohttp import web

from dynamiq.access.roles import Access
from dynamiq.api import schemas as s
from dynamiq.api.bodies import json_response
from dynamiq.api.context import services_of
from dynamiq.api.openapi import openapi_document
from dynamiq.api.routes import Link, Param, Route, node, route_defs
from dynamiq.api.v2 import keys
from dynamiq.api.v2.handlers import (
    cancel_redrive,
    change_visibility,
    configure_queue,
    create_queue,
    create_topic,
    delete,
    delete_queue,
    delete_topic,
    get_queue,
    get_topic,
    list_queues,
    list_topics,
    node_stats,
    peek,
    peek_many,
    publish,
    publish_topic,
    purge_queue,
    queue_stats,
    receive,
    redrive,
    redrive_status,
    status,
    subscribe,
    unsubscribe,
)
from dynamiq.api.v2.webhooks import WEBHOOK_ROUTES
from dynamiq.service import reports
from dynamiq.service.reports import RedriveView

__all__ = ["ROUTES", "routes"]


async def openapi(request: web.Request) -> web.Response:
    """Serve the OpenAPI document of this API."""
    keyed = services_of(request).guard.enabled
    return json_response(openapi_document(ROUTES, node(request).limits, keyed))


_MAX = Param("max", {"type": "integer", "minimum": 1, "default": 10}, at_most_batch=True)
# A listing's page: names starting with ``prefix``, after ``after``, ``limit`` at most.
_PAGE = (
    Param("prefix", {"type": "string"}),
    Param("after", {"type": "string"}),
    Param("limit", {"type": "integer", "minimum": 1, "maximum": 10_000, "default": 1000}),
)
_STATS_PAGE = (
    *_PAGE[:2],
    Param("limit", {"type": "integer", "minimum": 1, "maximum": 10_000, "default": 100}),
    Param("order", {"type": "string", "enum": ["name", "busiest"], "default": "name"}),
)
# A topic's page of subscriptions: those after the queue ``after``, ``limit`` at most.
_SUBSCRIPTIONS_PAGE = _PAGE[1:]
Q = "/v2/queues/{queue}"
T = "/v2/topics/{topic}"

# What follows which: a queue made is published to, received from, looked at,
# redriven and dropped; a published message is received, a received one deleted
# or let go; a topic made is subscribed to and published to. (Cancelling a
# redrive is no step of a queue's life: it ends one another call started, and
# the redrive's GET still shows it, cancelled.)
_QUEUE = {"queue": "$request.path.queue"}
_TOPIC = {"topic": "$request.path.topic"}
_RECEIVED = ["$response.body#/messages/0/id"]
_TO_QUEUE = tuple(
    Link(h, _QUEUE)
    for h in (
        publish,
        receive,
        get_queue,
        configure_queue,
        queue_stats,
        peek_many,
        purge_queue,
        redrive,
        redrive_status,
        delete_queue,
    )
)
_PUBLISHED = (Link(receive, _QUEUE),)
_LEASED = (
    Link(delete, _QUEUE, {"ids": _RECEIVED}),
    Link(change_visibility, _QUEUE, {"ids": _RECEIVED, "visibility_timeout": 0}),
)
_TO_TOPIC = tuple(Link(h, _TOPIC) for h in (get_topic, publish_topic, delete_topic))
_SUBSCRIBED = (
    Link(publish_topic, _TOPIC),
    Link(unsubscribe, {**_TOPIC, **_QUEUE}),
)

ROUTES: tuple[Route, ...] = (
    Route("GET", "/v2/openapi.json", openapi, access=Access.OPEN),
    Route(
        "GET",
        "/v2/queues",
        list_queues,
        "List queues, a page at a time",
        response=s.QueueList,
        query=_PAGE,
        access=Access.READ,
        links=(Link(create_queue),),
    ),
    Route(
        "PUT",
        Q,
        create_queue,
        "Create a queue",
        s.QueueSettingsBody,
        s.QueueInfo,
        201,
        False,
        access=Access.MANAGE,
        links=_TO_QUEUE,
    ),
    Route("GET", Q, get_queue, "Describe a queue", response=s.QueueInfo, access=Access.READ),
    Route(
        "PATCH",
        Q,
        configure_queue,
        "Change queue settings",
        s.QueueSettingsBody,
        s.QueueInfo,
        access=Access.MANAGE,
    ),
    Route("DELETE", Q, delete_queue, "Delete a queue and its messages", access=Access.MANAGE),
    Route(
        "POST",
        f"{Q}/purge",
        purge_queue,
        "Drop every message published before the call",
        response=s.PurgeResponse,
        access=Access.MANAGE,
    ),
    Route(
        "POST",
        f"{Q}/redrive",
        redrive,
        "Move a dead-letter queue's messages back to their source queues (or to one)",
        s.RedriveRequest,
        RedriveView,
        202,
        False,
        access=Access.MANAGE,
    ),
    Route(
        "GET",
        f"{Q}/redrive",
        redrive_status,
        "The latest redrive",
        response=RedriveView,
        access=Access.READ,
    ),
    Route(
        "DELETE",
        f"{Q}/redrive",
        cancel_redrive,
        "Cancel a redrive",
        response=RedriveView,
        access=Access.MANAGE,
    ),
    Route(
        "POST",
        f"{Q}/messages",
        publish,
        "Publish messages",
        s.PublishRequest,
        s.PublishResponse,
        access=Access.PRODUCE,
        links=_PUBLISHED,
    ),
    Route(
        "GET",
        f"{Q}/messages/{{id}}",
        peek,
        "Read a message without leasing it",
        response=s.PeekResponse,
        access=Access.CONSUME,
    ),
    Route(
        "POST",
        f"{Q}/receive",
        receive,
        "Lease messages (long poll with wait_seconds)",
        s.ReceiveRequest,
        s.ReceiveResponse,
        body_required=False,
        access=Access.CONSUME,
        links=_LEASED,
    ),
    Route(
        "POST",
        f"{Q}/delete",
        delete,
        "Delete messages",
        s.DeleteRequest,
        s.DeleteResponse,
        access=Access.CONSUME,
    ),
    Route(
        "POST",
        f"{Q}/visibility",
        change_visibility,
        "Extend leases, or end them with 0",
        s.VisibilityRequest,
        s.VisibilityResponse,
        access=Access.CONSUME,
    ),
    Route(
        "GET",
        f"{Q}/stats",
        queue_stats,
        "A queue's contents, oldest message age and rates",
        response=reports.QueueStatsDetail,
        access=Access.READ,
    ),
    Route(
        "GET",
        f"{Q}/peek",
        peek_many,
        "The oldest messages, without leasing them",
        response=s.ReceiveResponse,
        query=(_MAX,),
        access=Access.CONSUME,
    ),
    Route(
        "GET",
        "/v2/stats",
        node_stats,
        "A page of queues' stats (by name, or the busiest first), totals (over every queue "
        "where the store counts them, else the page's), how many "
        "queues there are",
        response=reports.NodeStats,
        query=_STATS_PAGE,
        access=Access.MONITOR,
    ),
    Route(
        "GET",
        "/v2/status",
        status,
        "This node and the cluster members it sees",
        response=reports.Status,
        access=Access.READ,
    ),
    Route(
        "GET",
        "/v2/topics",
        list_topics,
        "List topics, a page at a time",
        response=s.TopicList,
        query=_PAGE,
        access=Access.READ,
        links=(Link(create_topic),),
    ),
    Route(
        "PUT",
        T,
        create_topic,
        "Create a topic",
        response=s.TopicInfo,
        status=201,
        access=Access.MANAGE,
        links=_TO_TOPIC,
    ),
    Route(
        "GET",
        T,
        get_topic,
        "Describe a topic, with a page of its subscriptions",
        response=s.TopicInfo,
        query=_SUBSCRIPTIONS_PAGE,
        access=Access.READ,
    ),
    Route("DELETE", T, delete_topic, "Delete a topic", access=Access.MANAGE),
    Route(
        "PUT",
        f"{T}/subscriptions/{{queue}}",
        subscribe,
        "Subscribe a queue, with what it takes",
        s.SubscriptionBody,
        s.TopicInfo,
        query=_SUBSCRIPTIONS_PAGE,
        body_required=False,
        access=Access.MANAGE,
        links=_SUBSCRIBED,
    ),
    Route(
        "DELETE",
        f"{T}/subscriptions/{{queue}}",
        unsubscribe,
        "Unsubscribe a queue",
        response=s.TopicInfo,
        query=_SUBSCRIPTIONS_PAGE,
        access=Access.MANAGE,
    ),
    Route(
        "POST",
        f"{T}/messages",
        publish_topic,
        "Publish to the subscribed queues that take each message",
        s.PublishRequest,
        s.TopicPublishResponse,
        access=Access.PRODUCE,
    ),
    *keys.ROUTES,
)


ROUTES += WEBHOOK_ROUTES


def routes() -> list[web.RouteDef]:
    """Return the v2 route table."""
    return route_defs(ROUTES)
