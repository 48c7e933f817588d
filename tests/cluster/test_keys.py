"""Keys in a cluster: made on one node, used on every node, revoked on every node at once."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dynamiq.testing.cluster import LocalCluster

pytestmark = pytest.mark.timeout(120)

ADMIN_KEY = "a-cluster-administrators-key-0123456789abcdef"


@pytest.fixture
def keyed_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        tmp_path,
        3,
        env={"DYNAMIQ_AUTH_ENABLED": "true", "DYNAMIQ_AUTH_ADMINKEY": ADMIN_KEY},
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _call(url: str, method: str, key: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.load(error)


def test_a_key_revoked_on_one_node_is_refused_by_every_node_when_the_revoke_answers(
    keyed_cluster: LocalCluster,
) -> None:
    n1, n2, n3 = (keyed_cluster.nodes[n] for n in ("n1", "n2", "n3"))
    status, made = _call(
        f"{n1.url}/v2/keys", "POST", ADMIN_KEY, {"application": "app", "role": "manage"}
    )
    assert status == 201
    key = made["key"]
    assert _call(f"{n2.url}/v2/queues/q", "PUT", key)[0] == 201
    for node in (n1, n2, n3):  # each node checks the key once, then knows it
        assert _call(f"{node.url}/v2/queues", "GET", key) == (200, {"queues": ["q"]})
    assert _call(f"{n3.url}/v2/queues", "GET", ADMIN_KEY) == (200, {"queues": ["app:q"]})
    assert _call(f"{n1.url}/v2/keys/{made['key_id']}", "DELETE", ADMIN_KEY)[0] == 200
    # The revoke answers once the other nodes reloaded: they refuse it already.
    for node in (n2, n3, n1):
        status, body = _call(f"{node.url}/v2/queues", "GET", key)
        assert (status, body["error"]) == (401, "UNAUTHORIZED"), node.name
