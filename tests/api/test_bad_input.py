"""Bad input of every kind gets a clear 4xx and changes nothing; nothing gives a 5xx."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

Http = TestClient[Any, Any]

BIG = b"x" * 70_000  # the fixture allows 64 KiB bodies
MANY = {"messages": [{"body": "m"}] * 101}  # the fixture allows batches of 100


@pytest.fixture
async def seeded(http: Http) -> Http:
    await http.put("/v2/queues/q", json={"visibility_timeout": 30})
    await http.put("/v2/queues/r")
    await http.put("/v2/topics/t")
    await http.put("/v2/topics/t/subscriptions/q")
    await http.post("/v2/queues/q/messages", json={"messages": [{"body": "a"}, {"body": "b"}]})
    await http.post("/v2/queues/q/receive", json={"max_messages": 1})
    return http


async def snapshot(http: Http) -> dict[str, Any]:
    """Everything a client can observe, without leasing anything."""
    queues = (await (await http.get("/v2/queues")).json())["queues"]
    topics = (await (await http.get("/v2/topics")).json())["topics"]
    return {
        "queues": {q: await (await http.get(f"/v2/queues/{q}")).json() for q in queues},
        "topics": {t: await (await http.get(f"/v2/topics/{t}")).json() for t in topics},
    }


JSON = {"Content-Type": "application/json"}  # what v2 needs; v1 reads raw bytes

CASES: list[tuple[str, str, Any, int]] = [
    # (method, path, body: bytes or JSON-able, expected status)
    ("POST", "/v2/queues/q/messages", BIG, 413),
    ("PUT", "/v1/queues/q/message", BIG, 413),
    ("PUT", "/v1/topics/t/message", BIG, 413),
    ("POST", "/v2/queues/q/messages", MANY, 422),
    ("POST", "/v2/topics/t/messages", MANY, 422),
    ("POST", "/v2/queues/q/messages", {"messages": []}, 422),
    ("POST", "/v2/queues/q/messages", {"messages": [{"body": 5}]}, 422),
    ("POST", "/v2/queues/q/messages", {"messages": [{"body": "!!", "encoding": "base64"}]}, 422),
    ("POST", "/v2/queues/q/messages", {"messages": [{"body": "x", "encoding": "rot13"}]}, 422),
    ("POST", "/v2/queues/q/messages", {"msgs": []}, 422),
    ("POST", "/v2/queues/q/messages", [1, 2], 422),
    ("POST", "/v2/queues/q/messages", b"{not json", 400),
    ("POST", "/v2/queues/q/messages", b"\xff\xfe", 400),
    ("POST", "/v2/queues/q/receive", {"max_messages": 0}, 422),
    ("POST", "/v2/queues/q/receive", {"max_messages": 101}, 422),
    ("POST", "/v2/queues/q/receive", {"max_messages": "5"}, 422),
    ("POST", "/v2/queues/q/receive", b'{"max_messages": 1e400}', 400),
    ("POST", "/v2/queues/q/receive", b"\x0b", 400),  # not JSON whitespace, so not empty
    ("POST", "/v2/queues/q/receive", {"wait_seconds": -1}, 422),
    ("POST", "/v2/queues/q/receive", {"wait_seconds": 6}, 422),
    ("POST", "/v2/queues/q/receive", {"visibility_timeout": -1}, 422),
    ("POST", "/v2/queues/q/receive", {"visibility_timeout": 10**9}, 422),
    ("POST", "/v2/queues/q/receive", {"max_messages": 1, "extra": True}, 422),
    ("POST", "/v2/queues/q/receive", b"[", 400),
    ("POST", "/v2/queues/q/delete", {"ids": []}, 422),
    ("POST", "/v2/queues/q/delete", {"ids": ["abc"]}, 422),
    ("POST", "/v2/queues/q/delete", {"ids": ["99999999999999999999"]}, 422),
    ("POST", "/v2/queues/q/delete", {"ids": ["9223372036854775808"]}, 422),
    ("POST", "/v2/queues/q/delete", {"ids": [1]}, 422),
    ("POST", "/v2/queues/q/visibility", {"ids": ["1"], "visibility_timeout": -1}, 422),
    ("POST", "/v2/queues/q/visibility", {"ids": [], "visibility_timeout": 5}, 422),
    ("POST", "/v2/queues/q/visibility", {"ids": ["1"]}, 422),
    ("POST", "/v2/queues/q/visibility", {"ids": ["x"], "visibility_timeout": 5}, 422),
    ("GET", "/v2/queues/q/messages/abc", None, 422),
    ("GET", "/v2/queues/q/messages/-1", None, 422),
    ("PUT", "/v2/queues/bad name", None, 422),
    ("PUT", "/v2/queues/" + "a" * 81, None, 422),
    ("PUT", "/v2/queues/caf%C3%A9", None, 422),
    ("PUT", "/v2/topics/bad*name", None, 422),
    ("PUT", "/v1/queues/bad%20name", None, 422),
    ("PUT", "/v1/topics/%00", None, 422),
    ("PUT", "/v2/queues/new", {"min_partitions": 5, "max_partitions": 2}, 422),
    ("PUT", "/v2/queues/new", {"visibility_timeout": -1}, 422),
    ("PATCH", "/v2/queues/q", {"min_partitions": 0}, 422),
    ("PATCH", "/v2/queues/q", {"min_partitions": 11}, 422),
    ("PATCH", "/v2/queues/q", {"visibility_timeout": "slow"}, 422),
    ("PATCH", "/v2/queues/q", {"colour": "red"}, 422),
    ("PATCH", "/v1/queues/q", {"min_partitions": 20, "max_partitions": 3}, 422),
    ("PATCH", "/v1/queues/q", {"min_partitions": 1.5}, 422),
    ("PATCH", "/v1/queues/q", {"visibility_timeout": -5}, 422),
    ("PATCH", "/v1/queues/q", {"max_partition_age": 0}, 422),
    ("PATCH", "/v1/queues/q", {"compressed_messages": "yes"}, 422),
    ("PATCH", "/v1/queues/q", b"NaN", 400),
    ("PATCH", "/v1/queues/q", b"[1]", 400),
    ("PATCH", "/v1/queues/q", b"{", 400),
    ("GET", "/v1/queues/q/message/x1", None, 422),
    ("DELETE", "/v1/queues/q/message/1e5", None, 422),
    ("DELETE", "/v1/queues/q/messages/1,,2", None, 422),
    ("DELETE", "/v1/queues/q/messages/" + ",".join(["1"] * 101), None, 422),
    ("PUT", "/v1/topics/t/queues/nosuch", None, 422),
]


@pytest.mark.parametrize(("method", "path", "body", "status"), CASES)
async def test_bad_input_is_rejected_and_changes_nothing(
    seeded: Http, method: str, path: str, body: Any, status: int
) -> None:
    before = await snapshot(seeded)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    response = await seeded.request(method, path, data=data, headers=JSON)
    payload = await response.json()
    assert response.status == status, payload
    assert isinstance(payload, dict) and payload["error"]
    if path.startswith("/v2/"):
        assert set(payload) == {"error", "message"} and payload["error"].isupper()
    assert await snapshot(seeded) == before


def _junk(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([0, -1, 1, 2**63, -(2**70), 10**30, 3.5, 1e308])
    if kind == 2:
        return rng.choice(["", "x", "AAAA", "\u0000", "9223372036854775807", "😀" * 3])
    if kind in (3, 4, 5):
        return rng.choice(["max_messages", "messages", "ids", "body", "wait_seconds"])
    if kind == 6:
        return [_junk(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = [
        "messages",
        "body",
        "encoding",
        "ids",
        "max_messages",
        "wait_seconds",
        "visibility_timeout",
        "min_partitions",
        "max_partitions",
        "compressed_messages",
    ]
    return {rng.choice(keys): _junk(rng, depth + 1) for _ in range(rng.randrange(4))}


async def test_random_bodies_never_cause_a_5xx(seeded: Http) -> None:
    rng = random.Random(2026)
    targets = [
        ("POST", "/v2/queues/q/messages"),
        ("POST", "/v2/queues/q/receive"),
        ("POST", "/v2/queues/q/delete"),
        ("PATCH", "/v2/queues/r"),
        ("PATCH", "/v1/queues/r"),
        ("PUT", "/v2/queues/fresh"),
        ("POST", "/v2/topics/t/messages"),
    ]
    for _ in range(400):
        method, path = rng.choice(targets)
        junk = _junk(rng)
        if isinstance(junk, dict) and path.endswith("/receive"):
            junk.pop("wait_seconds", None)  # keep the run short; waits are tested elsewhere
        response = await seeded.request(method, path, data=json.dumps(junk).encode(), headers=JSON)
        assert response.status < 500, (method, path, junk, await response.text())
