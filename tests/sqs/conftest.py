"""Live nodes for the SQS endpoint's tests, driven by boto3 as users drive AWS."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NodeProcess
from tests.servers import flush_redis, require, require_module, require_path

JS = Path(__file__).parent / "js"


def sqs_client(
    url: str, service: str = "sqs", region: str = "us-east-1", validate: bool = True
) -> Any:
    """A boto3 client of SQS (or SNS) on ``url``, configured as the AWS SDK guides say
    for emulators (signing for ``region``; without ``validate``, sending what it is
    given). Close it when done: a pooled connection collected open (to a node since
    killed, say) warns, and warnings fail tests."""
    import boto3
    from botocore.config import Config

    retries: Any = {"mode": "standard", "max_attempts": 2}
    return boto3.client(
        service,
        endpoint_url=url,
        region_name=region,
        aws_access_key_id="key",
        aws_secret_access_key="secret",
        config=Config(read_timeout=30, retries=retries, parameter_validation=validate),
    )


@pytest.fixture(scope="module", params=["lmdb", "redis-cluster"])
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One node on each store: LMDB, and the session's Redis Cluster (flushed first)."""
    data = Path(tmp_path_factory.mktemp(f"sqs-{request.param}"))
    flags: list[str] = []
    if request.param == "redis-cluster":
        url: str = request.getfixturevalue("redis_cluster_url")
        asyncio.run(flush_redis(url))
        flags = ["--storage-backend", "redis", "--storage-url", url]
    started = NodeProcess(data, *flags).start()
    try:
        yield started.url
    finally:
        started.stop()


@pytest.fixture
def sqs(node: str) -> Iterator[Any]:
    require_module("boto3", "test")
    with contextlib.closing(sqs_client(node)) as client:
        yield client


@pytest.fixture
def sns(node: str) -> Iterator[Any]:
    require_module("boto3", "test")
    with contextlib.closing(sqs_client(node, "sns")) as client:
        yield client


def queue_arn(sqs: Any, url: str) -> str:
    return str(
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
    )


def counts(sqs: Any, url: str) -> tuple[str, str]:
    """The queue's messages visible and in flight, as SQS reports them (text)."""
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return (
        attributes["ApproximateNumberOfMessages"],
        attributes["ApproximateNumberOfMessagesNotVisible"],
    )


@pytest.fixture
def new_queue(sqs: Any) -> Callable[..., str]:
    """Create a queue with a fresh name; return its URL."""

    def create(suffix: str = "", **attributes: str) -> str:
        name = f"q-{uuid.uuid4().hex[:12]}{suffix}"
        return str(sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])

    return create


def run_js(script: str, *args: str) -> Any:
    """Run ``script`` of ``js/`` with Node.js and the AWS SDK for JavaScript v3 (``npm ci``
    installs it); return what it printed, as JSON."""
    runtime = require("node")
    require_path(JS / "node_modules" / "@aws-sdk" / "client-sqs", "setup.sh runs npm ci")
    done = subprocess.run(
        [runtime, str(JS / script), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
