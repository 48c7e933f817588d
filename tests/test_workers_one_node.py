"""A node's workers are one node to its clients: what one of them answered is seen at
once through the other, on v1 and v2 alike.

A client cannot choose the worker that serves a connection (the kernel spreads
them), but each worker stores a publish in its own half of the node's slice:
the id of a message published through a connection tells whose it is. Every
check here holds one kept-alive connection to each worker.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dynamiq.client import Client
from dynamiq.keyspace import KEYSPACE
from tests.conftest import NodeProcess
from tests.waiting import until

pytestmark = pytest.mark.timeout(300)

TRIES = 1000
JSON = {"Content-Type": "application/json"}


class Worker:
    """A connection served by one worker of the node."""

    def __init__(self, connection: http.client.HTTPConnection) -> None:
        self.connection = connection

    def call(self, method: str, path: str, body: Any = None, raw: bytes | None = None) -> Any:
        """The answer's body (JSON when it is), after a 2xx."""
        if raw is None:
            data, headers = json.dumps(body).encode() if body is not None else None, JSON
        else:
            data, headers = raw, {}
        self.connection.request(method, path, body=data, headers=headers)
        answer = self.connection.getresponse()
        text = answer.read()
        assert 200 <= answer.status < 300, f"{method} {path}: {answer.status} {text!r}"
        kind = answer.getheader("Content-Type", "")
        return json.loads(text) if kind.startswith("application/json") else text.decode()

    def publish(self, queue: str, body: str, group: str | None = None, api: str = "v2") -> int:
        if api == "v1":
            return int(self.call("PUT", f"/v1/queues/{queue}/message", raw=body.encode()))
        message = {"body": body} if group is None else {"body": body, "group": group}
        return int(
            self.call("POST", f"/v2/queues/{queue}/messages", {"messages": [message]})["ids"][0]
        )

    def receive(self, queue: str, want: int = 10, api: str = "v2") -> list[int]:
        """Lease up to ``want`` visible messages, without waiting."""
        if api == "v1":
            return [int(m["id"]) for m in self.call("GET", f"/v1/queues/{queue}/messages/{want}")]
        ask = {"max_messages": want, "wait_seconds": 0, "visibility_timeout": 60}
        got = self.call("POST", f"/v2/queues/{queue}/receive", ask)["messages"]
        return [int(m["id"]) for m in got]

    def delete(self, queue: str, ids: list[int], api: str = "v2") -> None:
        if api == "v1":
            for done in ids:
                assert self.call("DELETE", f"/v1/queues/{queue}/message/{done}") is True
        else:
            self.call("POST", f"/v2/queues/{queue}/delete", {"ids": [str(i) for i in ids]})


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A node of two workers, once each serves its half of the slice.

    The first worker up serves the whole slice; when the second joins, it stores
    what is published into its half at once, but leases from it only once the first
    has handed over the leases it held there. Until then a receive finds nothing
    there, by design (else a message could be leased twice).
    """
    started = NodeProcess(tmp_path_factory.mktemp("workers"), "--core-workers", "2").start()
    try:
        until(lambda: _settled(started.url), timeout=30, what="both workers serving their half")
        yield started
    finally:
        started.stop()


def _settled(url: str) -> bool:
    """Whether the node's two workers each serve the half of the slice they hold."""
    with urllib.request.urlopen(f"{url}/v2/status", timeout=5) as answer:
        workers = json.load(answer)["workers"]
    return len(workers) == 2 and all(
        w["slice"] is not None and w["serving"] == w["slice"] for w in workers
    )


@pytest.fixture
def workers(node: NodeProcess) -> Iterator[tuple[Worker, Worker]]:
    """A connection to each worker: the first stores in the slice's lower half."""
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    with Client(node.url) as client:
        client.create_queue(probe)
    address = urllib.parse.urlsplit(node.url)
    found: dict[bool, Worker] = {}
    with contextlib.ExitStack() as connections:
        for _ in range(200):
            worker = Worker(
                connections.enter_context(
                    contextlib.closing(
                        http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)
                    )
                )
            )
            found.setdefault(worker.publish(probe, "which worker?") >= KEYSPACE // 2, worker)
            if len(found) == 2:
                break
        assert len(found) == 2, "every connection went to one worker"
        yield found[False], found[True]


def _queue(node: NodeProcess, **settings: Any) -> str:
    name = f"q-{uuid.uuid4().hex[:8]}"
    with Client(node.url) as client:
        client.create_queue(name, **settings)
    return name


@pytest.mark.parametrize("api", ["v1", "v2"])
def test_a_publish_through_one_worker_is_received_through_the_other_at_once(
    node: NodeProcess, workers: tuple[Worker, Worker], api: str
) -> None:
    queue = _queue(node)
    misses = 0
    for i in range(TRIES):
        into, out = workers if i % 2 == 0 else workers[::-1]
        assert out.receive(queue, api=api) == []  # as a consumer polls: nothing yet
        sent = into.publish(queue, f"m{i}", api=api)
        got = out.receive(queue, api=api)
        misses += sent not in got
        into.delete(queue, got or [sent], api=api)
    assert misses == 0, f"{misses} of {TRIES} publishes not received through the other worker"


def test_a_group_s_next_message_is_offered_through_the_other_worker_once_its_head_is_deleted(
    node: NodeProcess, workers: tuple[Worker, Worker]
) -> None:
    queue = _queue(node)
    late = 0
    for i in range(TRIES // 10):
        into, out = workers if i % 2 == 0 else workers[::-1]
        group = f"g{i}"
        head, after = into.publish(queue, "head", group), into.publish(queue, "after", group)
        assert into.receive(queue, 1) == [head], f"group {i}"  # the rest waits on it
        out.delete(queue, [head])
        got = out.receive(queue)
        late += got != [after]
        into.delete(queue, got or [after])
    assert late == 0, f"{late} of {TRIES // 10} groups' next messages not offered at once"


def test_a_queue_made_again_through_one_worker_takes_a_topic_s_copies_through_the_other(
    node: NodeProcess, workers: tuple[Worker, Worker]
) -> None:
    topic, queue = f"t-{uuid.uuid4().hex[:8]}", _queue(node)
    workers[0].call("PUT", f"/v2/topics/{topic}", {})
    missed = 0
    for i in range(TRIES // 10):
        into, out = workers if i % 2 == 0 else workers[::-1]
        into.call("DELETE", f"/v2/queues/{queue}")  # its subscriptions with it
        out.call("PUT", f"/v2/queues/{queue}", {})
        into.call("PUT", f"/v2/topics/{topic}/subscriptions/{queue}", {})
        out.call("POST", f"/v2/topics/{topic}/messages", {"messages": [{"body": f"m{i}"}]})
        missed += len((into, out)[i % 3 % 2].receive(queue)) != 1
    assert missed == 0, f"{missed} of {TRIES // 10} copies missed by a queue made again"
