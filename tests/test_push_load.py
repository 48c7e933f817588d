"""A slow endpoint with 10,000 messages waiting for it: its subscription's throttle is
held, and the node holds no more of them than it has deliveries in flight (the rest
wait in the store), as a real node process serves them."""

from __future__ import annotations

import time
import urllib.request

from dynamiq.client import Client
from dynamiq.testing.endpoint import Receiver
from tests.conftest import NodeFactory

PENDING = 10_000
RATE = 40  # maxReceivesPerSecond
CONCURRENCY = 8


def test_a_slow_endpoint_is_throttled_and_its_backlog_stays_in_the_store(
    node_factory: NodeFactory,
) -> None:
    node = node_factory("--push-concurrency", str(CONCURRENCY)).start()
    receiver = Receiver(delay=0.1)  # a slow endpoint: 100 ms an answer
    try:
        with Client(node.url) as client:
            client.create_topic("slow")
            policy = {"throttlePolicy": {"maxReceivesPerSecond": RATE}}
            hook = client.create_webhook("slow", receiver.url, delivery_policy=policy)
            asked = receiver.wait_for("SubscriptionConfirmation")[0].document()
            with urllib.request.urlopen(asked["SubscribeURL"], timeout=10):
                pass
            for start in range(0, PENDING, 100):
                client.publish_topic("slow", [f"m{start + i}".encode() for i in range(100)])
            began, counted = time.monotonic(), len(receiver.of("Notification"))
            most_leased = 0
            while time.monotonic() - began < 4:
                [shown] = [h for h in client.webhooks("slow") if h["id"] == hook["id"]]
                most_leased = max(most_leased, shown["in_flight"])
                time.sleep(0.2)
            elapsed = time.monotonic() - began
            delivered = len(receiver.of("Notification")) - counted
            # The throttle: at most RATE a second, and a second's worth at first.
            assert 0 < delivered <= RATE * (elapsed + 1), delivered
            assert receiver.most_in_flight <= CONCURRENCY
            # What is leased (in the node's memory) is what is in flight and as many
            # ready for the next free slot, not the backlog.
            assert most_leased <= 2 * CONCURRENCY
            assert shown["pending"] >= PENDING - RATE * (elapsed + 2)
    finally:
        receiver.close()
