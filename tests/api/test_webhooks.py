"""v2 webhooks on a node served in this process, on a fake clock: made, confirmed through
``SubscribeURL``, delivered to a real endpoint, retried when it fails after the delay
its policy gives (the clock moved, not waited for), changed and removed; and the
refusals, which change nothing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp.test_utils import TestClient

from dynamiq.api.context import SERVICES
from dynamiq.core.clock import FakeClock
from dynamiq.testing.endpoint import Delivery, Receiver
from tests.conftest import node_client_with, store_flags
from tests.sns_signatures import verify
from tests.waiting import eventually


@pytest.fixture(params=["lmdb", "redis-cluster"])
async def clocked(
    request: pytest.FixtureRequest, tmp_path: Path, fake_clock: FakeClock
) -> AsyncIterator[TestClient[Any, Any]]:
    async with await node_client_with(await store_flags(request, tmp_path), fake_clock) as client:
        yield client


@contextlib.asynccontextmanager
async def _receiving(answer: Callable[[Delivery], int] | None = None) -> AsyncIterator[Receiver]:
    """An endpoint serving while the block runs (it waits for its server to start)."""
    receiver = await asyncio.to_thread(Receiver, answer)
    try:
        yield receiver
    finally:
        await asyncio.to_thread(receiver.close)


async def confirmed_webhook(
    http: TestClient[Any, Any], receiver: Receiver, **extra: Any
) -> dict[str, Any]:
    """A webhook on a new topic ``orders``, confirmed the way an endpoint does it."""
    assert (await http.put("/v2/topics/orders")).status == 201
    made = await http.post("/v2/topics/orders/webhooks", json={"url": receiver.url, **extra})
    assert made.status == 201, await made.text()
    hook: dict[str, Any] = await made.json()
    assert hook["state"] == "pending" and hook["url"] == receiver.url
    asked = (await receiver.arrived("SubscriptionConfirmation"))[0].document()
    link = urlsplit(asked["SubscribeURL"])
    assert (await http.get(f"{link.path}?{link.query}")).status == 200
    shown: dict[str, Any] = await (
        await http.get(f"/v2/topics/orders/webhooks/{hook['id']}")
    ).json()
    assert shown["state"] == "confirmed"
    return shown


async def test_a_webhook_is_confirmed_then_delivered_to(clocked: TestClient[Any, Any]) -> None:
    async with _receiving() as receiver:
        hook = await confirmed_webhook(clocked, receiver, filter={"kind": ["order"]})
        published = await clocked.post(
            "/v2/topics/orders/messages",
            json={
                "messages": [
                    {"body": "wanted", "attributes": {"kind": "order"}},
                    {"body": "filtered out", "attributes": {"kind": "refund"}},
                ]
            },
        )
        assert published.status == 200
        [got] = await receiver.arrived("Notification")
        document = got.document()
        cert = urlsplit(document["SigningCertURL"]).path
        verify(document, await (await clocked.get(cert)).read())
        assert document["Message"] == "wanted"
        topic = await (await clocked.get("/v2/topics/orders")).json()
        assert topic["subscriptions"] == []  # a webhook is no queue's subscription
        listed = await (await clocked.get("/v2/topics/orders/webhooks")).json()
        assert [h["id"] for h in listed["webhooks"]] == [hook["id"]]
        assert listed["webhooks"][0]["filter"] == {"kind": ["order"]}

        changed = await clocked.patch(
            f"/v2/topics/orders/webhooks/{hook['id']}", json={"raw": True}
        )
        assert (await changed.json())["raw"] is True
        await clocked.post(
            "/v2/topics/orders/messages",
            json={"messages": [{"body": "bare", "attributes": {"kind": "order"}}]},
        )
        assert (await receiver.arrived("Notification", 2))[1].body == b"bare"

        assert (await clocked.delete(f"/v2/topics/orders/webhooks/{hook['id']}")).status == 200
        assert (await (await clocked.get("/v2/topics/orders/webhooks")).json())["webhooks"] == []
        gone = await clocked.get(f"/v2/topics/orders/webhooks/{hook['id']}")
        assert gone.status == 404


async def test_a_failed_delivery_is_retried_after_the_policy_s_delay(
    clocked: TestClient[Any, Any], fake_clock: FakeClock
) -> None:
    answers = iter([500, 503])

    def answer(delivery: Delivery) -> int:
        return next(answers, 200) if delivery.kind == "Notification" else 200

    policy = {
        "healthyRetryPolicy": {
            "numRetries": 2,
            "minDelayTarget": 30,
            "maxDelayTarget": 60,
            "backoffFunction": "linear",
        }
    }
    async with _receiving(answer) as receiver:
        hook = await confirmed_webhook(clocked, receiver, delivery_policy=policy)
        url = f"/v2/topics/orders/webhooks/{hook['id']}"
        await clocked.post("/v2/topics/orders/messages", json={"messages": [{"body": "late"}]})
        await receiver.arrived("Notification")
        await _failures_handled(clocked, 1)
        shown = await (await clocked.get(url)).json()
        assert shown["state"] == "failing"
        assert (shown["pending"], shown["in_flight"]) == (0, 1)  # waiting out its delay

        # Linear backoff from 30 to 60 s over two retries: 45 s, then 60 s.
        fake_clock.advance(44)
        await _quiet(receiver, 1)
        fake_clock.advance(2)
        await receiver.arrived("Notification", 2)
        await _failures_handled(clocked, 2)
        fake_clock.advance(58)
        await _quiet(receiver, 2)
        fake_clock.advance(2)
        await receiver.arrived("Notification", 3)

        async def settled() -> dict[str, Any] | None:  # the delete follows the endpoint's answer
            shown: dict[str, Any] = await (await clocked.get(url)).json()
            return None if shown["pending"] or shown["in_flight"] else shown

        shown = await eventually(settled, what="nothing pending or in flight")
        assert shown["state"] == "confirmed"


async def _failures_handled(http: TestClient[Any, Any], count: int) -> None:
    """Wait until the node has dealt with ``count`` failed attempts (their retries set):
    the clock must not move while an answer is still on its way back to the node."""
    counted = f'dynamiq_topic_notifications_failed_total{{topic="orders"}} {count}.0'

    async def seen() -> bool:
        return counted in await (await http.get("/metrics")).text()

    await eventually(seen, what=counted)


async def _quiet(receiver: Receiver, count: int) -> None:
    """Give the node a moment (real time): still only ``count`` notifications came."""
    await asyncio.sleep(1.5)
    assert len(receiver.of("Notification")) == count


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://example.com/"}, "url"),
        ({"url": "http://169.254.169.254/latest"}, "url"),
        ({"url": "http://127.0.0.1:9/x", "dead_letter_queue": "nowhere"}, "dead_letter_queue"),
        (
            {"url": "http://127.0.0.1:9/x", "delivery_policy": {"healthyRetryPolicy": 3}},
            "delivery_policy",
        ),
        ({"url": "http://127.0.0.1:9/x", "filter": {"kind": [{"prefix": 1}]}}, "filter"),
    ],
)
async def test_refused_webhooks_change_nothing(
    lmdb_http: TestClient[Any, Any], body: dict[str, Any], field: str
) -> None:
    assert (await lmdb_http.put("/v2/topics/orders")).status == 201
    refused = await lmdb_http.post("/v2/topics/orders/webhooks", json=body)
    answer = await refused.json()
    assert refused.status == 422, answer
    assert answer["error"] == "INVALID" and answer["message"].startswith(f"{field}: "), answer
    assert (await (await lmdb_http.get("/v2/topics/orders/webhooks")).json())["webhooks"] == []


async def test_the_signing_key_rotates_and_the_old_certificate_stays_served(
    clocked: TestClient[Any, Any],
) -> None:
    async with _receiving() as receiver:
        await confirmed_webhook(clocked, receiver)
        body = {"messages": [{"body": "before"}]}
        await clocked.post("/v2/topics/orders/messages", json=body)
        before = (await receiver.arrived("Notification"))[0].document()
        rotated = await clocked.post("/v2/signing-key")
        assert rotated.status == 200
        made = await rotated.json()
        assert made["key_id"] not in before["SigningCertURL"]
        await clocked.post("/v2/topics/orders/messages", json={"messages": [{"body": "after"}]})
        after = (await receiver.arrived("Notification", 2))[1].document()
        assert after["SigningCertURL"] == made["certificate_url"]
        for document in (before, after):  # each checks with its own certificate, still served
            served = await clocked.get(urlsplit(document["SigningCertURL"]).path)
            assert served.status == 200
            verify(document, await served.read())
        unknown = await clocked.get("/sns/cert/0123456789abcdef.pem")
        assert unknown.status == 404


async def test_an_unconfirmed_webhook_goes_after_three_days(
    clocked: TestClient[Any, Any], fake_clock: FakeClock
) -> None:
    assert (await clocked.put("/v2/topics/orders")).status == 201
    made = await clocked.post("/v2/topics/orders/webhooks", json={"url": "http://127.0.0.1:9/x"})
    hook = await made.json()
    webhooks = clocked.app[SERVICES].node.webhooks  # the node in this process
    assert webhooks is not None
    fake_clock.advance(3 * 86400 - 60)
    await webhooks.tidy(fake_clock.wall_ms())
    assert (await clocked.get(f"/v2/topics/orders/webhooks/{hook['id']}")).status == 200
    fake_clock.advance(120)
    await webhooks.tidy(fake_clock.wall_ms())
    assert (await clocked.get(f"/v2/topics/orders/webhooks/{hook['id']}")).status == 404
