"""The chaos command's push load: a topic whose webhook is a local endpoint, published to
throughout the rounds; every message whose publish was acknowledged must reach the
endpoint (at least once: a delivery under way when its node died comes again)."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections import Counter

from dynamiq.client import Client
from dynamiq.testing.endpoint import Receiver

__all__ = ["PushLoad"]

TOPIC = "chaos-push"
BATCH = 10


class PushLoad:
    """Publishes ``rate`` messages a second to a topic pushed to a local endpoint."""

    def __init__(self, urls: list[str], rate: float) -> None:
        self._urls = urls
        self._rate = rate
        self.receiver = Receiver()
        self.acknowledged: set[str] = set()
        self.failed_publishes = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._publish, daemon=True)

    def start(self) -> PushLoad:
        with Client(self._urls) as client:
            client.create_topic(TOPIC)
            client.create_webhook(TOPIC, self.receiver.url)
        asked = self.receiver.wait_for("SubscriptionConfirmation")[0].document()
        with urllib.request.urlopen(asked["SubscribeURL"], timeout=10):
            pass
        self._thread.start()
        return self

    def _publish(self) -> None:
        sent = 0
        with Client(self._urls, timeout=10) as client:
            started = time.monotonic()
            while not self._stopping.is_set():
                bodies = [f"push-{sent + i}" for i in range(BATCH)]
                sent += BATCH
                try:
                    client.publish_topic(TOPIC, [b.encode() for b in bodies])
                except Exception:  # a node down: not acknowledged, so not counted
                    self.failed_publishes += 1
                else:
                    self.acknowledged.update(bodies)
                pause = started + sent / self._rate - time.monotonic()
                if pause > 0:
                    self._stopping.wait(pause)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(30)

    def delivered(self) -> Counter[str]:
        """How many times each message reached the endpoint."""
        return Counter(d.message() for d in self.receiver.of("Notification"))

    def drain(self, timeout: float) -> bool:
        """Wait until every acknowledged message reached the endpoint."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.acknowledged <= set(self.delivered()):
                return True
            time.sleep(0.2)
        return False

    def report(self) -> tuple[list[str], bool]:
        """The report's lines, and whether a check failed (a message lost)."""
        got = self.delivered()
        lost = self.acknowledged - set(got)
        duplicates = sum(n - 1 for n in got.values())
        lines = [
            f"  acknowledged          {len(self.acknowledged):8}",
            f"  publishes refused     {self.failed_publishes:8}",
            f"  delivered             {len(set(got) & self.acknowledged):8}",
            f"  lost                  {len(lost):8}  (must be 0)",
            f"  delivered twice+      {duplicates:8}",
        ]
        self.receiver.close()
        return lines, bool(lost)
