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


def _sqs(url: str, made: dict[str, Any]) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=made["access_key_id"],
        aws_secret_access_key=made["secret_access_key"],
        config=Config(retries={"max_attempts": 1}),
    )


def _code(call: Any, **params: Any) -> str:
    from botocore.exceptions import ClientError

    try:
        call(**params)
    except ClientError as refused:
        return str(refused.response["Error"]["Code"])
    return "served"


def test_credentials_and_policies_hold_on_every_node_when_the_change_answers(
    keyed_cluster: LocalCluster,
) -> None:
    n1, n2, n3 = (keyed_cluster.nodes[n] for n in ("n1", "n2", "n3"))
    made = {}
    for application, role in (("alpha", "manage"), ("beta", "produce")):
        body = {"application": application, "role": role, "aws": True}
        status, made[application] = _call(f"{n1.url}/v2/keys", "POST", ADMIN_KEY, body)
        assert status == 201
    alpha = {n.name: _sqs(n.url, made["alpha"]) for n in (n1, n2, n3)}
    beta = {n.name: _sqs(n.url, made["beta"]) for n in (n1, n2, n3)}
    try:
        url = alpha["n2"].create_queue(QueueName="shared")["QueueUrl"]
        send = {"QueueUrl": url, "MessageBody": "m"}
        assert {_code(c.send_message, **send) for c in beta.values()} == {"AccessDenied"}
        alpha["n1"].add_permission(
            QueueUrl=url,
            Label="beta",
            AWSAccountIds=[made["beta"]["account"]],
            Actions=["SendMessage"],
        )
        assert [_code(beta[n].send_message, **send) for n in ("n2", "n3")] == ["served"] * 2
        alpha["n1"].remove_permission(QueueUrl=url, Label="beta")
        assert {_code(beta[n].send_message, **send) for n in ("n2", "n3")} == {"AccessDenied"}
        # A new sealing key: every node unseals under it once the rotation answers.
        status, _ = _call(f"{n1.url}/v2/sealing-key", "POST", ADMIN_KEY)
        assert status == 201
        assert [_code(alpha[n].list_queues) for n in ("n2", "n3", "n1")] == ["served"] * 3
        status, _ = _call(f"{n3.url}/v2/keys/{made['beta']['key_id']}", "DELETE", ADMIN_KEY)
        assert status == 200
        assert {_code(c.list_queues) for c in beta.values()} == {"InvalidClientTokenId"}
    finally:
        for c in [*alpha.values(), *beta.values()]:
            c.close()
