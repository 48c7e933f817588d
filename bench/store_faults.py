"""Store faults for the chaos command: a Redis Cluster primary killed or paused.

A round hits one of the store's primaries (``RedisCluster.fail_primary``):
it kills it (``kill -9``) and starts it again once its replica is promoted,
or stops it (``SIGSTOP``) past the node timeout and lets it go on; either
way it comes back as a replica.

Then it waits until every primary has its replica in step again. A probe
publishes one message and receives and deletes what it finds, through each
Dynamiq node in turn, twenty times a second, throughout; the time to serve
again is how long after the fault the last probe call failed. With
``waitreplicas = 1`` a primary without a replica refuses writes, so that
time includes the old primary's restart and resynchronisation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from dynamiq.client import Client
from dynamiq.errors import DynamiqError
from tests.servers import RedisCluster

__all__ = ["STORE_FAULTS", "Probe", "Recovery", "store_fault"]

STORE_FAULTS = ("primary kill -9", "primary SIGSTOP")
PROBE_QUEUE = "chaos-probe"
PROBE_EVERY = 0.05


class Probe:
    """Publishes, receives and deletes through every node in turn; notes each failure."""

    def __init__(self, urls: Sequence[str]) -> None:
        self._urls = list(urls)
        self._failed: list[float] = []  # monotonic ends of the calls that failed
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Probe:
        with Client(self._urls) as client:
            client.create_queue(PROBE_QUEUE, visibility_timeout=5.0)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def last_failure(self, since: float) -> float | None:
        """The end of the last failed call after ``since`` (monotonic), if any."""
        with self._lock:
            return max((t for t in self._failed if t >= since), default=None)

    def _run(self) -> None:
        clients = [Client(url, rounds=1, timeout=3.0) for url in self._urls]
        try:
            while not self._stop.wait(PROBE_EVERY):
                for client in clients:
                    try:
                        client.publish(PROBE_QUEUE, ["probe"])
                        got = client.receive(PROBE_QUEUE, 10)
                        if got:
                            client.delete(PROBE_QUEUE, [m.id for m in got])
                    except DynamiqError:
                        with self._lock:
                            self._failed.append(time.monotonic())
        finally:
            for client in clients:
                client.close()


@dataclass(frozen=True)
class Recovery:
    """How one store fault went: the primary hit, when its replica was promoted and
    when every probe call succeeded again (seconds after the fault)."""

    victim: int
    promoted: float
    serving: float


def store_fault(redis: RedisCluster, probe: Probe, fault: str) -> Recovery:
    """Hit a random primary with ``fault``; return once the store is whole again."""
    started = time.monotonic()
    victim, promoted = redis.fail_primary(fault.removeprefix("primary "))
    time.sleep(1.0)  # probes after the store is whole: a failure here counts too
    last = probe.last_failure(started)
    return Recovery(victim, promoted, 0.0 if last is None else last - started)
