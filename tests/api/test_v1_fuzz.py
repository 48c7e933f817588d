"""v1 fuzzed: any verb, path, batch size, id list and body a v1 client could send gets an
answer, never a server error.

One node process serves every example (its queues and topics accumulate, as
on a node that has been up a while); a queue and a topic with messages are
made first, so that examples reach the routes' work and not only their 404s.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynamiq.client import Client
from tests.conftest import NodeProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NAMES = st.one_of(
    st.sampled_from(["fuzzed", "fuzzed-topic", "missing", "a" * 300, "..", "%00", "é"]),
    st.text(st.characters(codec="utf-8", exclude_characters="/?#"), min_size=1, max_size=12),
)
NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["0", "-1", "1e3", "0x10", "NaN", "", " 1", "\uff11"]),
)
IDS = st.lists(NUMBERS, max_size=30).map(",".join)
BODIES = st.one_of(
    st.none(),
    st.binary(max_size=300),
    st.text(max_size=300).map(str.encode),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=20,
    ).map(lambda value: json.dumps(value).encode()),
)
PATHS = st.one_of(
    st.tuples(st.just("queues"), NAMES, st.just("messages"), NUMBERS),
    st.tuples(st.just("queues"), NAMES, st.just("messages"), IDS),
    st.tuples(st.just("queues"), NAMES, st.just("message"), NUMBERS),
    st.tuples(st.just("queues"), NAMES, st.just("message")),
    st.tuples(st.just("queues"), NAMES),
    st.tuples(st.just("topics"), NAMES, st.just("queues"), NAMES),
    st.tuples(st.just("topics"), NAMES, st.just("message")),
    st.tuples(st.just("topics"), NAMES),
    st.tuples(st.sampled_from(["queues", "topics", "status/servers", "status/partitionrange"])),
    st.lists(NAMES, max_size=5).map(tuple),
)
VERBS = st.sampled_from(["GET", "PUT", "PATCH", "DELETE", "POST", "HEAD"])
QUERIES = st.dictionaries(
    st.sampled_from(["visibility_timeout", "min_partitions", "max_partitions", "x"]),
    NUMBERS,
    max_size=3,
)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    made = NodeProcess(tmp_path_factory.mktemp("v1-fuzz")).start()
    try:
        with Client(made.url) as client:
            client.create_queue("fuzzed")
            client.create_topic("fuzzed-topic")
            client.subscribe("fuzzed-topic", "fuzzed")
            client.publish("fuzzed", [f"m{i}".encode() for i in range(200)])
        yield made
    finally:
        made.stop()


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(verb=VERBS, parts=PATHS, query=QUERIES, body=BODIES)
def test_no_v1_request_gets_a_server_error(
    node: NodeProcess, verb: str, parts: tuple[str, ...], query: dict[str, str], body: bytes | None
) -> None:
    path = "/v1/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)
    if query:
        path += "?" + urllib.parse.urlencode(query)
    host, port = urllib.parse.urlsplit(node.url).netloc.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        headers = {"Host": "localhost", "Content-Type": "application/json"}
        connection.request(verb, path, body=body, headers=headers)
        response = connection.getresponse()
        answer = response.read()
    finally:
        connection.close()
    assert response.status < 500, (verb, path, body, response.status, answer[:300])
    if verb != "HEAD" and response.status >= 400:
        assert "error" in json.loads(answer), answer[:300]
