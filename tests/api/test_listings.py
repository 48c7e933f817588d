"""Listings of queues and topics a page at a time: by prefix, after a name, a limit, with
``next`` for the following page; every name exactly once however the catalog changes
between pages."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.documented import Http, call
from tests.waiting import eventually


async def pages(http: Http, spec: dict[str, Any], path: str, field: str, **query: Any) -> list[str]:
    """Every name a listing gives, following ``next``."""
    names: list[str] = []
    after = ""
    while True:
        asked = "&".join(f"{k}={v}" for k, v in {**query, "after": after}.items() if v != "")
        page = await call(http, spec, "GET", f"{path}?{asked}", 200)
        names += page[field]
        if "next" not in page:
            return names
        assert page["next"] == page[field][-1] and len(page[field]) == query.get("limit", 1000)
        after = page["next"]


async def test_queues_and_topics_list_a_page_at_a_time(http: Http, spec: dict[str, Any]) -> None:
    made = [f"orders-{i:02}" for i in range(23)] + ["other-a", "other-b"]
    for name in made:
        await call(http, spec, "PUT", f"/v2/queues/{name}", 201)
        await call(http, spec, "PUT", f"/v2/topics/{name}", 201)
    for path, field in (("/v2/queues", "queues"), ("/v2/topics", "topics")):
        every = (await call(http, spec, "GET", path, 200))[field]
        assert every == sorted(made)  # one page by default: no next
        assert await pages(http, spec, path, field, limit=10) == sorted(made)
        orders = await pages(http, spec, path, field, prefix="orders-", limit=5)
        assert orders == sorted(n for n in made if n.startswith("orders-"))
        first = await call(http, spec, "GET", f"{path}?prefix=orders-1&limit=3", 200)
        assert first == {field: ["orders-10", "orders-11", "orders-12"], "next": "orders-12"}
        rest = await call(http, spec, "GET", f"{path}?after=orders-20", 200)
        assert rest == {field: ["orders-21", "orders-22", "other-a", "other-b"]}
        assert (await call(http, spec, "GET", f"{path}?prefix=nothing", 200)) == {field: []}


async def test_every_name_comes_once_while_others_come_and_go(
    http: Http, spec: dict[str, Any]
) -> None:
    stable = [f"q{i:03}" for i in range(0, 60, 2)]
    for name in stable:
        await call(http, spec, "PUT", f"/v2/queues/{name}", 201)
    seen: list[str] = []
    after, turn = "", 0
    while True:
        query = f"limit=7&after={after}" if after else "limit=7"
        page = await call(http, spec, "GET", f"/v2/queues?{query}", 200)
        seen += page["queues"]
        if "next" not in page:
            break
        after = page["next"]
        # between pages: a name before the cursor and one after it come, one goes
        turn += 1
        await call(http, spec, "PUT", f"/v2/queues/q{2 * turn - 1:03}", 201)
        await call(http, spec, "PUT", f"/v2/queues/q{59 - 2 * turn:03}", 201)
        await call(http, spec, "DELETE", f"/v2/queues/q{59 - 2 * turn:03}", 200)
    assert len(seen) == len(set(seen)) and seen == sorted(seen)
    assert set(stable) <= set(seen)


async def test_stats_come_a_page_at_a_time(http: Http, spec: dict[str, Any]) -> None:
    made = [f"s{i:02}" for i in range(12)]
    for i, name in enumerate(made):
        await call(http, spec, "PUT", f"/v2/queues/{name}", 201)
        body = {"messages": [{"body": "x"}] * i}
        if i:
            await call(http, spec, "POST", f"/v2/queues/{name}/messages", 200, body)
    whole = await call(http, spec, "GET", "/v2/stats", 200)  # they fit in one page
    assert [q["queue"] for q in whole["queues"]] == made and "next" not in whole
    assert whole["queue_count"] == 12 and whole["totals"]["depth"] == sum(range(12))
    seen, after = [], ""
    while True:
        page = await call(http, spec, "GET", f"/v2/stats?limit=5&after={after}", 200)
        seen += [q["queue"] for q in page["queues"]]
        totals = page["totals"]  # every page sums every queue
        assert totals["scope"] == "all" and totals["depth"] == sum(range(12))
        assert page["queue_count"] == 12
        if "next" not in page:
            break
        after = page["next"]
    assert seen == made
    some = await call(http, spec, "GET", "/v2/stats?prefix=s1", 200)
    assert [q["queue"] for q in some["queues"]] == ["s10", "s11"]
    assert some["totals"]["scope"] == "page" and some["totals"]["depth"] == 21


async def test_stats_totals_sum_every_queue_off_the_page_too(
    http: Http, spec: dict[str, Any]
) -> None:
    names = [f"t{i:02}" for i in range(30)]
    for i, name in enumerate(names):
        await call(http, spec, "PUT", f"/v2/queues/{name}", 201)
        if i:
            body = {"messages": [{"body": "x"}] * i}
            await call(http, spec, "POST", f"/v2/queues/{name}/messages", 200, body)
    for name, count in (("t07", 2), ("t25", 3)):  # leases on queues off the first page
        ask = {"max_messages": count, "visibility_timeout": 60}
        got = await call(http, spec, "POST", f"/v2/queues/{name}/receive", 200, ask)
        assert len(got["messages"]) == count
    page = await call(http, spec, "GET", "/v2/stats?limit=5", 200)
    assert [q["queue"] for q in page["queues"]] == names[:5]
    depth = sum(range(30))
    assert page["totals"] == {
        "scope": "all",
        "depth": depth,
        "in_flight": 5,
        "visible": depth - 5,
        "rates": page["totals"]["rates"],
    }
    await call(http, spec, "DELETE", "/v2/queues/t29", 200)
    one = {"messages": [{"body": "y"}]}
    await call(http, spec, "POST", "/v2/queues/t28/messages", 200, one)

    async def dropped() -> dict[str, Any] | None:  # the deleted queue's, in the background
        totals: dict[str, Any] = (await call(http, spec, "GET", "/v2/stats?limit=1", 200))["totals"]
        return totals if totals["depth"] == depth - 28 else None

    totals = await eventually(dropped, 10.0, 0.05, what="the deleted queue's messages dropped")
    assert totals["depth"] == depth - 28 and totals["in_flight"] == 5


async def test_stats_can_put_the_busiest_queues_first(http: Http, spec: dict[str, Any]) -> None:
    for name in ("idle", "calm", "busy", "busier", "other-busy"):
        await call(http, spec, "PUT", f"/v2/queues/{name}", 201)
    traffic = {"calm": 1, "busy": 5, "busier": 20, "other-busy": 10}
    for name, publishes in traffic.items():
        for _ in range(publishes):
            body = {"messages": [{"body": "x"}]}
            await call(http, spec, "POST", f"/v2/queues/{name}/messages", 200, body)
    busiest = await call(http, spec, "GET", "/v2/stats?order=busiest", 200)
    ranked = [q["queue"] for q in busiest["queues"]]
    assert ranked == ["busier", "other-busy", "busy", "calm"]  # an unused queue is not ranked
    assert busiest["queue_count"] == 5 and "next" not in busiest
    assert busiest["totals"]["depth"] == sum(traffic.values())
    top = await call(http, spec, "GET", "/v2/stats?order=busiest&limit=2&prefix=bus", 200)
    assert [q["queue"] for q in top["queues"]] == ["busier", "busy"]
    refused = await call(http, spec, "GET", "/v2/stats?order=busiest&after=busy", 422)
    assert "after" in refused["message"]
    refused = await call(http, spec, "GET", "/v2/stats?order=loudest", 422)
    assert "order" in refused["message"]


@pytest.mark.parametrize("limit", ["0", "10001", "x", "-1", "1.5", "9999999999"])
async def test_a_bad_limit_is_refused(http: Http, spec: dict[str, Any], limit: str) -> None:
    refused = await call(http, spec, "GET", f"/v2/queues?limit={limit}", 422)
    assert "limit" in refused["message"]


async def test_a_topic_s_subscriptions_come_a_page_at_a_time(
    http: Http, spec: dict[str, Any]
) -> None:
    queues = [f"sub-{i:02}" for i in range(25)]
    await call(http, spec, "PUT", "/v2/topics/wide", 201)
    for name in reversed(queues):
        await call(http, spec, "PUT", f"/v2/queues/{name}", 201)
        await call(http, spec, "PUT", f"/v2/topics/wide/subscriptions/{name}", 200)
    hook = {"url": "http://127.0.0.1:9/hook"}  # a webhook is listed as one, not here
    await call(http, spec, "POST", "/v2/topics/wide/webhooks", 201, hook)
    whole = await call(http, spec, "GET", "/v2/topics/wide", 200)
    assert whole["queues"] == queues and "next" not in whole
    seen, after = [], ""
    while True:
        query = f"limit=7&after={after}" if after else "limit=7"
        page = await call(http, spec, "GET", f"/v2/topics/wide?{query}", 200)
        assert page["queues"] == [s["queue"] for s in page["subscriptions"]]
        seen += page["queues"]
        if "next" not in page:
            break
        assert page["next"] == page["queues"][-1] and len(page["queues"]) == 7
        after = page["next"]
    assert seen == queues
    # A change answers the topic's first page, as a GET of it does.
    changed = await call(http, spec, "DELETE", "/v2/topics/wide/subscriptions/sub-00?limit=3", 200)
    assert changed == {
        "name": "wide",
        "queues": queues[1:4],
        "subscriptions": [{"queue": q} for q in queues[1:4]],
        "next": "sub-03",
    }
    again = await call(http, spec, "PUT", "/v2/topics/wide/subscriptions/sub-00?limit=2", 200)
    assert again["queues"] == queues[:2] and again["next"] == "sub-01"
