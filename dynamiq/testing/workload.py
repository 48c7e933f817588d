"""Steady publish/receive/delete load on a cluster, and the total-queue check of what it saw.

A Python take on Jepsen's total-queue checker: every id whose publish was
acknowledged must be delivered at least once (``lost`` must be 0); ids
delivered more than once are counted (``duplicated``: allowed, at-least-once);
ids delivered that no acknowledgement named come from publishes whose answer
was lost (``unacknowledged``). Used by ``bench.chaos`` and the cluster tests.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from dynamiq.client import Client
from dynamiq.errors import DynamiqError

__all__ = ["Ledger", "Report", "Workload"]


@dataclass
class Ledger:
    """What the clients saw, shared by their threads (guarded by ``lock``)."""

    acked: set[int] = field(default_factory=set)
    delivered: Counter[int] = field(default_factory=Counter)
    failed_publishes: int = 0
    failed_calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def report(self) -> Report:
        """Check the ledger: lost, duplicated, unacknowledged."""
        with self.lock:
            seen = set(self.delivered)
            return Report(
                acked=len(self.acked),
                delivered=len(seen),
                lost=len(self.acked - seen),
                duplicated=sum(n - 1 for n in self.delivered.values() if n > 1),
                unacknowledged=len(seen - self.acked),
                failed_publishes=self.failed_publishes,
            )


@dataclass(frozen=True)
class Report:
    """The verdict of the total-queue check."""

    acked: int
    delivered: int
    lost: int
    duplicated: int
    unacknowledged: int
    failed_publishes: int

    def lines(self) -> list[str]:
        """Return the figures, one per line."""
        return [
            f"published and acknowledged  {self.acked}",
            f"delivered (distinct)        {self.delivered}",
            f"lost                        {self.lost}",
            f"duplicated deliveries       {self.duplicated}",
            f"delivered, not acknowledged {self.unacknowledged}",
            f"publish calls that failed   {self.failed_publishes}",
        ]


class Workload:
    """Producers and consumers in threads, each with its own client over every node.

    Args:
        urls: the nodes; clients fail over between them.
        queue: an existing queue.
        rate: messages per second all producers aim for together.
        batch: messages per publish.
        consumers: consumer threads (each receives up to 50 and deletes them).
        visibility: lease seconds for each receive.
    """

    def __init__(
        self,
        urls: Sequence[str],
        queue: str,
        rate: float = 1000.0,
        batch: int = 20,
        producers: int = 1,
        consumers: int = 2,
        visibility: float = 5.0,
    ) -> None:
        self.urls = list(urls)
        self.queue = queue
        self.ledger = Ledger()
        self._interval = batch * producers / rate
        self._batch = batch
        self._visibility = visibility
        self._stop = threading.Event()
        self._consuming = threading.Event()
        self._consuming.set()
        self._threads = [
            threading.Thread(target=self._produce, args=(i,), daemon=True) for i in range(producers)
        ] + [threading.Thread(target=self._consume, daemon=True) for _ in range(consumers)]

    def start(self) -> Workload:
        """Start every thread."""
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop producing and consuming; wait for the threads."""
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _client(self) -> Client:
        return Client(self.urls, timeout=5.0, rounds=20, backoff=0.05)

    def _produce(self, index: int) -> None:
        count = 0
        next_at = time.monotonic()
        with self._client() as client:
            while not self._stop.is_set():
                bodies = [f"p{index}-{count + i}" for i in range(self._batch)]
                count += self._batch
                try:
                    ids = client.publish(self.queue, bodies)
                except DynamiqError:
                    with self.ledger.lock:
                        self.ledger.failed_publishes += 1
                else:
                    with self.ledger.lock:
                        self.ledger.acked.update(ids)
                next_at += self._interval
                time.sleep(max(0.0, next_at - time.monotonic()))

    def _consume(self) -> None:
        with self._client() as client:
            while not self._stop.is_set():
                self._consume_once(client, wait=0.5)

    def _consume_once(self, client: Client, wait: float) -> int:
        try:
            got = client.receive(
                self.queue, 50, wait_seconds=wait, visibility_timeout=self._visibility
            )
        except DynamiqError:
            with self.ledger.lock:
                self.ledger.failed_calls += 1
            return 0
        if not got:
            return 0
        with self.ledger.lock:
            self.ledger.delivered.update(m.id for m in got)
        try:
            client.delete(self.queue, [m.id for m in got])
        except DynamiqError:  # the lease ends and the messages come back: at-least-once
            with self.ledger.lock:
                self.ledger.failed_calls += 1
        return len(got)

    def drain(self, timeout: float = 60.0) -> bool:
        """Receive and delete until the store holds nothing; False if time ran out.

        Waits out leases lost with a node (they come back after the
        visibility timeout at most).
        """
        deadline = time.monotonic() + timeout
        with self._client() as client:
            while time.monotonic() < deadline:
                if self._consume_once(client, wait=0.2) == 0 and self._empty(client):
                    return True
        return False

    def _empty(self, client: Client) -> bool:
        """Whether the store holds nothing of the queue (False when no node answers)."""
        try:
            return int(client.queue(self.queue)["stats"]["depth"]) == 0
        except DynamiqError:
            return False
