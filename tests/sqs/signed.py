"""A node that needs keys, and the AWS SDKs' clients signing with the credentials it issues."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.conftest import ADMIN_KEY, NodeProcess

QUERY_MODELS = Path(sys.prefix) / "aws-models"


def keyed_node(data: Path, *flags: str) -> NodeProcess:
    """A node that needs keys, whose administrator's key is ``ADMIN_KEY``."""
    return NodeProcess(data, "--auth-enabled", "true", "--auth-adminkey", ADMIN_KEY, *flags).start()


def v2(url: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """Call v2 as the administrator; return the answer's JSON."""
    request = urllib.request.Request(
        url + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {ADMIN_KEY}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read() or b"null")


def credential(url: str, application: str, role: str) -> dict[str, Any]:
    """A new key of ``application`` with ``role``, and its AWS credential."""
    made: dict[str, Any] = v2(
        url, "POST", "/v2/keys", {"application": application, "role": role, "aws": True}
    )
    return made


def client(
    url: str,
    made: dict[str, Any],
    service: str = "sqs",
    *,
    query: bool = False,
    secret: str | None = None,
    region: str = "us-east-1",
    **extra: Any,
) -> Any:
    """A boto3 client (or, with ``query``, botocore 1.31's query-protocol SQS client)
    signing with ``made``'s credential (or ``secret`` in its stead)."""
    import botocore.session
    from botocore.config import Config

    session = botocore.session.get_session()
    if query:
        session.get_component("data_loader").search_paths.insert(0, str(QUERY_MODELS))
    made_client = session.create_client(
        service,
        endpoint_url=url,
        region_name=region,
        aws_access_key_id=made["access_key_id"],
        aws_secret_access_key=secret or made["secret_access_key"],
        config=Config(retries={"max_attempts": 1}),
        **extra,
    )
    if query:
        assert made_client.meta.service_model.protocol == "query"
    return made_client


def fetch(
    url: str, method: str = "GET", data: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """A raw HTTP call: its status, headers and body, errors included."""
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, dict(refused.headers), refused.read()
