"""The Prometheus scrape of a real node."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from dynamiq.core.catalog import Catalog
from dynamiq.core.clock import FakeClock
from dynamiq.core.queues import QueueService
from dynamiq.core.reporter import Reporter
from dynamiq.metrics.prometheus import OTHER_QUEUES, PrometheusMetrics, summed
from dynamiq.storage.lmdb import LmdbBackend
from tests.waiting import eventually


async def test_metrics_scrape_counts_what_happened(http: TestClient[Any, Any]) -> None:
    await http.put("/v2/queues/p")
    await http.post("/v2/queues/p/messages", json={"messages": [{"body": "a"}, {"body": "b"}]})
    got = await (await http.post("/v2/queues/p/receive", json={"max_messages": 5})).json()
    await http.post("/v2/queues/p/delete", json={"ids": [got["messages"][0]["id"], "7"]})
    await http.get("/v2/queues/missing")
    response = await http.get("/metrics")
    assert response.status == 200
    assert response.content_type == "text/plain"
    samples = _samples(await response.text())
    assert samples[("dynamiq_messages_sent_total", (("queue", "p"),))] == 2
    assert samples[("dynamiq_messages_received_total", (("queue", "p"),))] == 2
    assert samples[("dynamiq_messages_deleted_total", (("queue", "p"),))] == 1
    assert samples[("dynamiq_queue_fill_percent", (("queue", "p"),))] == 40
    assert samples[("dynamiq_http_errors_total", (("code", "QUEUE_NOT_FOUND"),))] == 1
    route = (("method", "POST"), ("route", "/v2/queues/{queue}/receive"), ("status", "200"))
    assert samples[("dynamiq_http_request_seconds_count", route)] == 1
    # The depth is read for the scrape itself (nothing reads it between scrapes).
    assert samples[("dynamiq_queue_depth", (("queue", "p"),))] == 1


async def test_dead_letters_expiry_and_redrive_are_counted(http: TestClient[Any, Any]) -> None:
    await http.put("/v2/queues/dead")
    await http.put(
        "/v2/queues/work",
        # A lease longer than a slow read on a loaded machine: a receive whose reads
        # outlast its lease hands nothing out (the lease ended meanwhile).
        json={"visibility_timeout": 1, "max_receives": 1, "dead_letter_queue": "dead"},
    )
    messages = [{"body": "poison"}, {"body": "brief", "ttl_seconds": 0.05}]
    await http.post("/v2/queues/work/messages", json={"messages": messages})
    await asyncio.sleep(0.1)  # "brief" expires; "poison" is received once, then lapses
    got = await (await http.post("/v2/queues/work/receive", json={"max_messages": 5})).json()
    assert [m["body"] for m in got["messages"]] == ["poison"]

    async def read(path: str, key: str) -> Any:
        return (await (await http.get(path)).json())[key]

    async def dead_lettered() -> bool:
        return bool((await read("/v2/queues/dead", "stats"))["depth"] == 1)

    async def redriven() -> bool:
        return bool(await read("/v2/queues/dead/redrive", "state") == "done")

    await eventually(dead_lettered, what="the dead letter")
    assert (await http.post("/v2/queues/dead/redrive")).status == 202
    await eventually(redriven, what="the redrive's end")
    samples = _samples(await (await http.get("/metrics")).text())
    assert samples[("dynamiq_messages_dead_lettered_total", (("queue", "work"),))] == 1
    assert samples[("dynamiq_messages_expired_total", (("queue", "work"),))] == 1
    assert samples[("dynamiq_messages_redriven_total", (("queue", "dead"),))] == 1


async def test_depths_are_read_with_statsd_only_and_of_queues_in_use(tmp_path: Path) -> None:
    store = _Counting(LmdbBackend(tmp_path / "store", map_size=1 << 30))
    catalog = Catalog(store)
    await catalog.create_queue("q")
    await catalog.create_queue("idle")  # never used here: its levels are not read
    queues = QueueService(store, catalog, FakeClock())
    await queues.publish("q", [b"m"])
    metrics = PrometheusMetrics()
    quiet = Reporter(queues, store, metrics, 1.0, queue_levels=False)
    pushing = Reporter(queues, store, metrics, 1.0, queue_levels=True)
    try:
        for _ in range(5):
            await quiet.run_once()
        assert store.counts == 0
        await pushing.run_once()
        assert store.counts == 1
    finally:
        await store.close()


class _Counting:
    """A real store that counts depth reads."""

    def __init__(self, store: LmdbBackend) -> None:
        self._store = store
        self.counts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def count(self, bucket: str) -> int:
        self.counts += 1
        return await self._store.count(bucket)


def test_a_nodes_workers_metrics_sum_their_counters_and_histograms_and_keep_one_gauge() -> None:
    first, second = PrometheusMetrics(), PrometheusMetrics()
    first.sent({"q": 3})
    second.sent({"q": 4})
    second.sent({"only-second": 1})
    first.request("/v2/x", "GET", 200, 0.0004)
    second.request("/v2/x", "GET", 200, 0.2)
    first.node_level(1, 0.001)
    second.node_level(1, 0.004)
    samples = _samples(summed(first.render(), [second.render()]).decode())
    assert samples[("dynamiq_messages_sent_total", (("queue", "q"),))] == 7
    assert samples[("dynamiq_messages_sent_total", (("queue", "only-second"),))] == 1
    assert ("dynamiq_messages_sent_created", (("queue", "only-second"),)) in samples
    request = (("method", "GET"), ("route", "/v2/x"), ("status", "200"))
    assert samples[("dynamiq_http_request_seconds_count", request)] == 2
    assert samples[("dynamiq_http_request_seconds_bucket", (("le", "0.0005"), *request))] == 1
    assert samples[("dynamiq_http_request_seconds_bucket", (("le", "0.5"), *request))] == 2
    assert samples[("dynamiq_cluster_size", ())] == 1  # a gauge: the answering worker's
    assert samples[("dynamiq_store_commit_seconds", ())] == 0.001


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """An exposition's samples by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_queues_past_the_cap_share_one_summed_series() -> None:
    metrics = PrometheusMetrics(max_queue_series=2)
    for i, queue in enumerate(["a", "b", "c", "d", "a"]):
        metrics.sent({queue: 10 + i})
        metrics.queue_level(queue, depth=100 + i, in_flight=i)
    metrics.queue_level("c", depth=1, in_flight=0)  # a later level replaces its earlier
    metrics.sent({"b": 1, "e": 2, "f": 3})  # a fan-out's copies, in one call
    samples = _samples(metrics.render().decode())
    sent = {
        labels: v for (name, labels), v in samples.items() if name == "dynamiq_messages_sent_total"
    }
    assert sent == {
        (("queue", "a"),): 10 + 14,
        (("queue", "b"),): 11 + 1,
        (("queue", OTHER_QUEUES),): 12 + 13 + 2 + 3,
    }
    depth = {labels: v for (name, labels), v in samples.items() if name == "dynamiq_queue_depth"}
    assert depth == {
        (("queue", "a"),): 104,
        (("queue", "b"),): 101,
        (("queue", OTHER_QUEUES),): 1 + 103,
    }
    flights = samples[("dynamiq_queue_in_flight", (("queue", OTHER_QUEUES),))]
    assert flights == 0 + 3
