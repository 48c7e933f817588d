"""The Prometheus scrape of a real node."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families


async def test_metrics_scrape_counts_what_happened(http: TestClient[Any, Any]) -> None:
    await http.put("/v2/queues/p")
    await http.post("/v2/queues/p/messages", json={"messages": [{"body": "a"}, {"body": "b"}]})
    got = await (await http.post("/v2/queues/p/receive", json={"max_messages": 5})).json()
    await http.post("/v2/queues/p/delete", json={"ids": [got["messages"][0]["id"], "7"]})
    await http.get("/v2/queues/missing")
    response = await http.get("/metrics")
    assert response.status == 200
    assert response.content_type == "text/plain"
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(await response.text())
        for s in family.samples
    }
    assert samples[("dynamiq_messages_sent_total", (("queue", "p"),))] == 2
    assert samples[("dynamiq_messages_received_total", (("queue", "p"),))] == 2
    assert samples[("dynamiq_messages_deleted_total", (("queue", "p"),))] == 1
    assert samples[("dynamiq_queue_fill_percent", (("queue", "p"),))] == 40
    assert samples[("dynamiq_http_errors_total", (("code", "QUEUE_NOT_FOUND"),))] == 1
    route = (("method", "POST"), ("route", "/v2/queues/{queue}/receive"), ("status", "200"))
    assert samples[("dynamiq_http_request_seconds_count", route)] == 1
