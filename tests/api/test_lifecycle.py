"""The message lifecycle over v2, on every store: settings, delays, expiry, receive
counts and dead letters; every answer checked against the OpenAPI document."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import datetime
from typing import Any

import pytest

from dynamiq.core.lifecycle.idle import SLACK_ROUNDS
from tests.api.documented import Http, call, publish, receive
from tests.waiting import eventually

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
DLQ_SETTINGS = {"visibility_timeout": 0.3, "max_receives": 2, "dead_letter_queue": "dlq"}


async def _publish(http: Http, spec: dict[str, Any], queue: str, *messages: Any) -> list[str]:
    ids: list[str] = (await publish(http, spec, f"/v2/queues/{queue}/messages", *messages))["ids"]
    return ids


async def _with_dead_letters(http: Http, spec: dict[str, Any], **settings: Any) -> None:
    """Make queue ``q``, whose poison messages go to ``dlq`` (``DLQ_SETTINGS``, but for
    ``settings``)."""
    await call(http, spec, "PUT", "/v2/queues/dlq", 201)
    await call(http, spec, "PUT", "/v2/queues/q", 201, {**DLQ_SETTINGS, **settings})


async def test_lifecycle_settings_round_trip_and_null_turns_them_off(
    http: Http, spec: dict[str, Any]
) -> None:
    await call(http, spec, "PUT", "/v2/queues/dlq", 201)
    settings = {
        **DLQ_SETTINGS,
        "retry_backoff": {"initial_seconds": 2, "multiplier": 3, "max_seconds": 60},
        "delay_seconds": 5,
        "retention_seconds": 3600,
        "dead_letter_on_expiry": True,
    }
    created = await call(http, spec, "PUT", "/v2/queues/q", 201, settings)
    assert created["settings"] == {
        "min_partitions": 1,
        "max_partitions": 10,
        "max_partition_age": 432000.0,
        "compressed_messages": False,
        "dedup_window_seconds": 300.0,
        "content_dedup": False,
        "expires_after_seconds": None,
        "receive_wait_seconds": 0.0,
        "max_message_bytes": None,
        "fifo": False,
        "tags": None,
        "max_depth": None,
        "dedup_scope": "queue",
        "sqs_attributes": None,
        **settings,
    }
    off = {"max_receives": None, "retry_backoff": None, "retention_seconds": None}
    patched = await call(http, spec, "PATCH", "/v2/queues/q", 200, off)
    assert {k: patched["settings"][k] for k in off} == off
    assert patched["settings"]["dead_letter_queue"] == "dlq"  # left as it was
    defaults = (await call(http, spec, "GET", "/v2/queues/dlq", 200))["settings"]
    assert defaults["max_receives"] is None and defaults["retry_backoff"] is None
    assert defaults["delay_seconds"] == 0 and defaults["dead_letter_on_expiry"] is False


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"max_receives": 0}, "max_receives"),
        ({"max_receives": 3}, "max_receives"),  # without a dead-letter queue
        ({"max_receives": 3, "dead_letter_queue": "nope"}, "dead_letter_queue"),
        ({"max_receives": 3, "dead_letter_queue": "SELF"}, "dead_letter_queue"),
        ({"dead_letter_queue": "a/b"}, "dead_letter_queue"),
        ({"retry_backoff": {"multiplier": 0.5}}, "retry_backoff.multiplier"),
        ({"retry_backoff": {"initial_seconds": 10, "max_seconds": 5}}, "initial_seconds"),
        ({"retry_backoff": {"jitter": True}}, "jitter"),
        ({"delay_seconds": 901}, "delay_seconds"),  # beyond limits.maxdelayseconds
        ({"delay_seconds": -1}, "delay_seconds"),
        ({"retention_seconds": 0}, "retention_seconds"),
        ({"dead_letter_on_expiry": True}, "dead_letter_on_expiry"),
    ],
)
async def test_bad_lifecycle_settings_are_422_naming_the_field_and_change_nothing(
    http: Http, spec: dict[str, Any], change: dict[str, Any], field: str
) -> None:
    def aimed(queue: str) -> dict[str, Any]:
        return {k: queue if v == "SELF" else v for k, v in change.items()}

    await call(http, spec, "PUT", "/v2/queues/q", 201)
    before = await call(http, spec, "GET", "/v2/queues/q", 200)
    error = await call(http, spec, "PATCH", "/v2/queues/q", 422, aimed("q"))
    assert error["error"] == "INVALID" and field in error["message"]
    assert await call(http, spec, "GET", "/v2/queues/q", 200) == before
    await call(http, spec, "PUT", "/v2/queues/other", 422, aimed("other"))
    await call(http, spec, "GET", "/v2/queues/other", 404)


async def test_a_dead_letter_queue_in_use_cannot_be_deleted(
    http: Http, spec: dict[str, Any]
) -> None:
    await _with_dead_letters(http, spec)
    refused = await call(http, spec, "DELETE", "/v2/queues/dlq", 409)
    assert refused["error"] == "QUEUE_IN_USE" and refused["message"].endswith("of q.")
    await call(http, spec, "GET", "/v2/queues/dlq", 200)
    await call(http, spec, "PATCH", "/v2/queues/q", 200, {"max_receives": None})
    await call(http, spec, "PATCH", "/v2/queues/q", 200, {"dead_letter_queue": None})
    await call(http, spec, "DELETE", "/v2/queues/dlq", 200)


async def test_a_poison_message_ends_in_the_dead_letter_queue_with_its_story(
    http: Http, spec: dict[str, Any]
) -> None:
    await _with_dead_letters(http, spec)
    (mid,) = await _publish(http, spec, "q", {"body": "\u00fcber", "encoding": "utf-8"})
    counts = []
    for _ in range(2):
        (m,) = await receive(http, spec, "q", wait=2)
        assert m["id"] == mid and ISO.match(m["first_received_at"])
        counts.append(m["receive_count"])
    assert counts == [1, 2]
    (dead,) = await receive(http, spec, "dlq", wait=3)
    assert dead["body"] == "\u00fcber" and dead["receive_count"] == 1
    note = dead["dead_letter"]
    assert (note["source_queue"], note["reason"], note["receive_count"]) == ("q", "max_receives", 2)
    assert ISO.match(note["dead_lettered_at"])
    peeked = await call(http, spec, "GET", f"/v2/queues/dlq/messages/{dead['id']}", 200)
    assert peeked["message"]["dead_letter"] == note
    assert await receive(http, spec, "q") == []


async def test_a_delayed_publish_is_received_when_due(http: Http, spec: dict[str, Any]) -> None:
    await call(http, spec, "PUT", "/v2/queues/q", 201)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await _publish(http, spec, "q", {"body": "later", "delay_seconds": 0.4}, "now")
    assert [m["body"] for m in await receive(http, spec, "q")] == ["now"]
    (later,) = await receive(http, spec, "q", wait=3)
    assert later["body"] == "later" and loop.time() - started >= 0.4
    error = await call(
        http,
        spec,
        "POST",
        "/v2/queues/q/messages",
        422,
        {"messages": [{"body": "x", "delay_seconds": 901}]},
    )
    assert "delay_seconds" in error["message"]


async def test_an_expired_message_is_never_received(http: Http, spec: dict[str, Any]) -> None:
    await call(http, spec, "PUT", "/v2/queues/q", 201)
    await _publish(http, spec, "q", {"body": "brief", "ttl_seconds": 0.2}, "lasting")
    await asyncio.sleep(0.25)
    assert [m["body"] for m in await receive(http, spec, "q")] == ["lasting"]
    for ttl in (0, -1):
        undying = {"body": "x", "ttl_seconds": ttl}
        await publish(http, spec, "/v2/queues/q/messages", undying, status=422)


async def test_an_expired_message_goes_without_a_receive(http: Http, spec: dict[str, Any]) -> None:
    await call(http, spec, "PUT", "/v2/queues/q", 201)
    await _publish(http, spec, "q", {"body": "brief", "ttl_seconds": 0.1}, "lasting")

    async def removed() -> bool:
        stats = await call(http, spec, "GET", "/v2/queues/q/stats", 200)
        # a stats read that counted the queue just before the removal may
        # report the removal with the old depth: wait for both to agree
        return bool((stats["depth"], stats["expired_total"]) == (1, 1))

    await eventually(removed, what="the expired message removed (an upkeep round: 2 s)")
    assert [m["body"] for m in await receive(http, spec, "q")] == ["lasting"]


async def test_v1_describes_only_the_original_settings(http: Http) -> None:
    await http.put("/v2/queues/dlq")
    await http.put("/v2/queues/q", json=DLQ_SETTINGS)
    described = await (await http.get("/v1/queues/q")).json()
    assert "max_receives" not in described and described["VisibilityTimeout"] == 0.3


async def test_a_redrive_over_http_moves_the_dead_letters_back(
    http: Http, spec: dict[str, Any]
) -> None:
    await _with_dead_letters(http, spec, max_receives=1)
    assert (await call(http, spec, "GET", "/v2/queues/dlq/redrive", 404))["error"] == "NOT_FOUND"
    await _publish(http, spec, "q", "one", "two")
    assert len(await receive(http, spec, "q")) == 2

    async def dead_lettered() -> bool:  # their one lease lapses: both are dead-lettered
        return bool((await call(http, spec, "GET", "/v2/queues/dlq", 200))["stats"]["depth"] == 2)

    await eventually(dead_lettered, what="both dead-lettered")
    await call(http, spec, "POST", "/v2/queues/dlq/redrive", 422, {"to": "dlq"})
    await call(http, spec, "POST", "/v2/queues/dlq/redrive", 404, {"to": "nope"})
    await call(http, spec, "POST", "/v2/queues/dlq/redrive", 422, {"max_per_second": 0})
    started = await call(http, spec, "POST", "/v2/queues/dlq/redrive", 202)
    assert started["state"] == "running" and started["to"] is None

    async def ended() -> dict[str, Any] | None:
        task: dict[str, Any] = await call(http, spec, "GET", "/v2/queues/dlq/redrive", 200)
        return task if task["state"] != "running" else None

    task = await eventually(ended, what="the redrive's end")
    assert (task["task"], task["state"], task["moved"], task["remaining"]) == (
        started["task"],
        "done",
        2,
        0,
    )
    back = await receive(http, spec, "q")
    assert sorted(m["body"] for m in back) == ["one", "two"]
    assert all(m["receive_count"] == 1 and "dead_letter" not in m for m in back)
    # A finished redrive is not running: cancelling it changes nothing.
    assert (await call(http, spec, "DELETE", "/v2/queues/dlq/redrive", 200))["state"] == "done"


async def test_a_running_redrive_is_refused_a_second_start_and_can_be_cancelled(
    http: Http, spec: dict[str, Any]
) -> None:
    await call(http, spec, "PUT", "/v2/queues/dlq", 201)
    await call(http, spec, "PUT", "/v2/queues/parking", 201)
    for start in range(0, 300, 100):
        await _publish(http, spec, "dlq", *[f"m{i}" for i in range(start, start + 100)])
    await call(
        http, spec, "POST", "/v2/queues/dlq/redrive", 202, {"to": "parking", "max_per_second": 100}
    )
    refused = await call(http, spec, "POST", "/v2/queues/dlq/redrive", 409)
    assert refused["error"] == "REDRIVE_RUNNING"
    cancelled = await call(http, spec, "DELETE", "/v2/queues/dlq/redrive", 200)
    assert cancelled["state"] == "cancelled" and cancelled["moved"] < 300
    await asyncio.sleep(1.2)  # past the pause after its first batch: it stays stopped
    final = await call(http, spec, "GET", "/v2/queues/dlq/redrive", 200)
    assert final["state"] == "cancelled" and final["moved"] + final["remaining"] == 300


async def test_an_auto_deleting_queue_says_when_it_will_go(
    http: Http, spec: dict[str, Any]
) -> None:
    before = time.time()
    created = await call(http, spec, "PUT", "/v2/queues/q", 201, {"expires_after_seconds": 60})
    after = time.time()
    assert created["settings"]["expires_after_seconds"] == 60
    at = datetime.fromisoformat(created["expires_at"]).timestamp()
    # Deleted after its window and the rounds a use elsewhere may take to be seen.
    assert before + 60 <= at <= after + 60 + SLACK_ROUNDS * 2 + 1
    off = await call(http, spec, "PATCH", "/v2/queues/q", 200, {"expires_after_seconds": None})
    assert "expires_at" not in off and off["settings"]["expires_after_seconds"] is None
    plain = await call(http, spec, "PUT", "/v2/queues/plain", 201)
    assert "expires_at" not in plain
