"""TLS with certificates made here: clients and nodes over HTTPS, reloaded on SIGHUP.

Every node is a real ``dynamiq serve`` process; the certificates come from a
certificate authority made for each test.
"""

from __future__ import annotations

import http.client
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dynamiq.client import Client
from dynamiq.errors import BackendUnavailable
from dynamiq.testing.cluster import LocalCluster
from tests.conftest import NodeFactory
from tests.pki import HOST, Pki
from tests.waiting import until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


def _round_trip(client: Client, queue: str = "q") -> None:
    client.create_queue(queue)
    client.publish(queue, [b"over tls"])
    assert [m.body for m in client.receive(queue, 10)] == [b"over tls"]


def _handshake_fails(attempt: Callable[[], object]) -> None:
    with pytest.raises(BackendUnavailable) as caught:
        attempt()
    assert "SSL" in str(caught.value) or "certificate" in str(caught.value).lower()


def test_a_node_with_a_certificate_serves_https_to_clients_that_trust_its_authority(
    node_factory: NodeFactory, pki: Pki
) -> None:
    node = node_factory(*pki.flags()).start()
    assert node.url.startswith("https://")
    with Client(node.url, ca_file=str(pki.ca_file)) as client:
        _round_trip(client)
    # A client that does not trust the authority stops at the handshake.
    with Client(node.url, rounds=1) as stranger:
        _handshake_fails(stranger.queues)
    # Plain HTTP on the port gets no answer it could take for one.
    plain = node.url.replace("https://", "http://")
    with Client(plain, rounds=1) as plain_client, pytest.raises(BackendUnavailable):
        plain_client.queues()


def test_with_a_client_authority_only_clients_with_its_certificates_are_served(
    node_factory: NodeFactory, pki: Pki
) -> None:
    node = node_factory(*pki.flags("--tls-cafile", str(pki.ca_file))).start()
    anonymous = Client(node.url, ca_file=str(pki.ca_file), rounds=1)
    with anonymous, pytest.raises(BackendUnavailable):
        anonymous.queues()
    with Client(node.url, ca_file=str(pki.ca_file), client_cert=pki.client_cert()) as known:
        _round_trip(known)


def _seen_if_trusted(url: str, ca_file: Path) -> bytes | None:
    """The certificate a new connection is shown, if ``ca_file`` trusts it."""
    try:
        return _certificate_seen(url, ca_file)
    except ssl.SSLError:
        return None


def _certificate_seen(url: str, ca_file: Path) -> bytes:
    """The certificate a new connection to ``url`` is shown (checked against ``ca_file``)."""
    port = int(url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(ca_file))
    connection = http.client.HTTPSConnection(HOST, port, context=context, timeout=5)
    try:
        connection.connect()
        assert connection.sock is not None
        seen = connection.sock.getpeercert(binary_form=True)
        assert seen is not None
        return seen
    finally:
        connection.close()


def _get_status(connection: http.client.HTTPSConnection) -> int:
    connection.request("GET", "/v2/status")
    response = connection.getresponse()
    response.read()
    return response.status


def test_sighup_loads_new_certificates_for_new_connections_and_keeps_open_ones(
    node_factory: NodeFactory, pki: Pki, tmp_path: Path
) -> None:
    node = node_factory(*pki.flags()).start()
    port = int(node.url.rsplit(":", 1)[1])
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    kept = http.client.HTTPSConnection(HOST, port, context=context, timeout=5)
    assert _get_status(kept) == 200
    before = _certificate_seen(node.url, pki.ca_file)

    # When the files are replaced by a certificate from another authority
    # and the node is told
    rotated = Pki(tmp_path, "rotated")  # writes its own certificate over the node's files
    node.signal(signal.SIGHUP)

    # Then a new connection is shown the new certificate, soon
    after = until(lambda: _seen_if_trusted(node.url, rotated.ca_file), what="the new certificate")
    assert after != before
    # ...the connection opened before goes on
    assert _get_status(kept) == 200
    kept.close()
    # ...and clients that trust only the old authority are refused from now on
    with Client(node.url, ca_file=str(pki.ca_file), rounds=1) as old:
        _handshake_fails(old.queues)

    # When the files are broken and the node is told, it keeps what it has
    pki.key_file.write_text("not a key")
    node.signal(signal.SIGHUP)
    said = "certificates not reloaded, the old ones stay"
    until(lambda: said in "".join(node.log), 10.0, 0.05, what=f"the node says {said!r}")
    assert node.proc is not None and node.proc.poll() is None
    assert _certificate_seen(node.url, rotated.ca_file) == after
    with Client(node.url, ca_file=str(rotated.ca_file)) as client:
        _round_trip(client)
    assert any("certificates not reloaded" in line for line in node.log)


def test_a_node_refuses_to_start_with_tls_files_it_cannot_use(
    node_factory: NodeFactory, pki: Pki
) -> None:
    pki.key_file.write_text("not a key")
    with pytest.raises(RuntimeError):
        node_factory(*pki.flags()).start()


def test_nodes_call_each_other_over_https_and_check_each_others_certificates(
    tmp_path: Path, pki: Pki
) -> None:
    # Given two nodes that trust only the cluster's authority for each other
    env = {
        "DYNAMIQ_TLS_CERTFILE": str(pki.cert_file),
        "DYNAMIQ_TLS_KEYFILE": str(pki.key_file),
        "DYNAMIQ_TLS_PEERCAFILE": str(pki.ca_file),
    }
    cluster = LocalCluster(tmp_path / "cluster", 2, env=env)
    try:
        cluster.start()
        n1, n2 = (n.url for n in cluster.nodes.values())
        assert n1.startswith("https://") and n2.startswith("https://")
        # When messages are published through one node (each stored in the
        # slice of the node its id falls in)
        with Client(n1, ca_file=str(pki.ca_file)) as one:
            one.create_queue("q")
            ids = set(one.publish("q", [f"m{i}".encode() for i in range(40)]))
        # Then the other hands out all of them: its own, and the first node's
        # through the internal routes, over HTTPS
        got: set[int] = set()
        with Client(n2, ca_file=str(pki.ca_file)) as two:
            deadline = time.monotonic() + 15
            while got != ids and time.monotonic() < deadline:
                got |= {m.id for m in two.receive("q", 100, wait_seconds=0.5)}
        assert got == ids
    finally:
        cluster.stop()


def test_the_command_line_takes_a_ca_file_for_https_nodes(
    node_factory: NodeFactory, pki: Pki
) -> None:
    node = node_factory(*pki.flags()).start()

    def dynamiq(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "dynamiq", "--url", node.url, "--json", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)

    made = dynamiq("--ca-file", str(pki.ca_file), "queues", "create", "q")
    assert made.returncode == 0, made.stderr
    listed = dynamiq("--ca-file", str(pki.ca_file), "queues", "list")
    assert listed.stdout.count('"q"') == 1, listed.stdout
    refused = dynamiq("queues", "list")  # the system's authorities do not know this one
    assert refused.returncode == 3 and "certificate" in refused.stderr.lower()
    unreadable = dynamiq("--ca-file", str(pki.where / "missing.pem"), "queues", "list")
    assert unreadable.returncode == 2 and "--ca-file" in unreadable.stderr
