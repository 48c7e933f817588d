"""The SigV4 door under the settings that change it, and under hostile clients: a closed
endpoint, a proxy that rewrites ``Host``, replayed and malformed requests, and a flood of
bad signatures from one address while another is served."""

from __future__ import annotations

import contextlib
import datetime
import http.client
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NodeProcess
from tests.servers import require_module
from tests.sqs.signed import client, credential, fetch, keyed_node

require_module("boto3", "test")

from botocore.auth import SigV4Auth  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402

LIST = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.ListQueues"}


@contextlib.contextmanager
def _node(tmp_path: Path, *flags: str) -> Iterator[NodeProcess]:
    started = keyed_node(tmp_path / "data", *flags)
    try:
        yield started
    finally:
        started.stop()


def _signed(url: str, made: dict[str, Any], secret: str | None = None) -> AWSRequest:
    request = AWSRequest(method="POST", url=url + "/", data=b"{}", headers=dict(LIST))
    credentials = Credentials(made["access_key_id"], secret or made["secret_access_key"])
    SigV4Auth(credentials, "sqs", "us-east-1").add_auth(request)
    return request


def _headers(request: AWSRequest) -> dict[str, str]:
    return {k: str(v) for k, v in request.prepare().headers.items()}


def test_a_closed_endpoint_refuses_even_good_signatures(tmp_path: Path) -> None:
    with _node(tmp_path, "--auth-sqs", "closed") as node:
        made = credential(node.url, "shop", "manage")
        with (
            contextlib.closing(client(node.url, made)) as sqs,
            pytest.raises(ClientError) as caught,
        ):
            sqs.list_queues()
        assert caught.value.response["Error"]["Code"] == "AccessDenied"
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


@pytest.mark.parametrize("trusted", [False, True])
def test_a_proxy_rewriting_host_is_believed_only_where_configured(
    tmp_path: Path, trusted: bool
) -> None:
    flags = ("--auth-trustedproxies", "127.0.0.0/8") if trusted else ()
    with _node(tmp_path, *flags) as node:
        made = credential(node.url, "shop", "manage")
        # The client signs for the proxy's name; the proxy sends it on with its own Host.
        signed = _signed("https://queue.example.com", made)
        headers = {
            **_headers(signed),
            "X-Forwarded-Host": "queue.example.com",
            "X-Forwarded-Proto": "https",
        }
        headers.pop("host", None)
        status, answer, _ = fetch(node.url + "/", "POST", b"{}", headers)
        if trusted:
            assert status == 200
        else:
            assert (status, answer["x-amzn-query-error"]) == (403, "SignatureDoesNotMatch;Sender")
        # Rewritten without saying so, it never holds.
        headers.pop("X-Forwarded-Host")
        status, _, _ = fetch(node.url + "/", "POST", b"{}", headers)
        assert status == 403


def test_a_replayed_request_is_served_within_the_window_and_refused_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SigV4 has no nonce: AWS serves a replay within its window, so does the node; the
    window (``auth.maxskewseconds``) bounds it."""
    with _node(tmp_path, "--auth-maxskewseconds", "60") as node:
        made = credential(node.url, "shop", "manage")
        headers = _headers(_signed(node.url, made))
        assert [fetch(node.url + "/", "POST", b"{}", headers)[0] for _ in range(2)] == [200, 200]
        then = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=90)
        monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: then)
        old = _headers(_signed(node.url, made))
        status, _, body = fetch(node.url + "/", "POST", b"{}", old)
        assert status == 403 and b"Signature expired" in body and b"- 1 min.)" in body


def test_malformed_and_oversized_authorization_headers_are_4xx(tmp_path: Path) -> None:
    with _node(tmp_path, "--auth-failedburst", "1000") as node:
        for authorization in (
            "AWS4-HMAC-SHA256",
            "AWS4-HMAC-SHA256 Credential=a/b/c/d/e, SignedHeaders=host, Signature=" + "0" * 64,
            "AWS4-HMAC-SHA256 Credential=" + "x/" * 2000,
            "Bearer dq0000000000000000.x",
            "\x01\x02",
        ):
            status, _, _ = fetch(
                node.url + "/", "POST", b"{}", {**LIST, "Authorization": authorization}
            )
            assert 400 <= status < 500, authorization
        status, _, _ = fetch(
            node.url + "/", "POST", b"{}", {**LIST, "Authorization": "A" * 100_000}
        )
        assert 400 <= status < 500


def _answer(reader: Any) -> int:
    """Read one answer off a kept-alive connection; return its status."""
    status = int(reader.readline().split()[1])
    length = 0
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.lower() == "content-length":
            length = int(value)
    reader.read(length)
    return status


def _flood(port: int, request: bytes, count: int, window: int = 50) -> tuple[Counter[int], float]:
    """Send ``count`` copies of ``request`` on one connection, ``window`` at a time
    pipelined; count the statuses answered, and return the seconds it took."""
    statuses: Counter[int] = Counter()
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as sock, sock.makefile("rb") as reader:
        for _ in range(count // window):
            sock.sendall(request * window)
            for _ in range(window):
                statuses[_answer(reader)] += 1
    return statuses, time.monotonic() - started


def test_a_flood_of_bad_signatures_from_one_address_is_throttled_while_others_are_served(
    tmp_path: Path,
) -> None:
    with _node(tmp_path, "--auth-failedburst", "20", "--auth-failedpersecond", "1") as node:
        made = credential(node.url, "shop", "manage")
        port = int(node.url.rsplit(":", 1)[1])
        bad = _headers(_signed(node.url, made, secret="x" * 40))
        head = "".join(f"{k}: {v}\r\n" for k, v in bad.items() if k.lower() != "content-length")
        request = (
            f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{head}Content-Length: 2\r\n\r\n{{}}"
        )
        served: list[int] = []
        done = threading.Event()

        def neighbour() -> None:  # another address, signing well, all along
            while not done.is_set():
                connection = http.client.HTTPConnection(
                    "127.0.0.1", port, timeout=30, source_address=("127.0.0.2", 0)
                )
                good = _headers(_signed(node.url, made))
                connection.request("POST", "/", b"{}", good)
                served.append(connection.getresponse().status)
                connection.close()

        other = threading.Thread(target=neighbour)
        other.start()
        try:
            statuses, seconds = _flood(port, request.encode(), 10_000)
        finally:
            done.set()
            other.join()
        assert sum(statuses.values()) == 10_000
        assert not [s for s in statuses if s >= 500], statuses
        assert statuses[403] <= 20 + seconds * 1 + 1  # past the burst, none is checked
        assert statuses[400] >= 10_000 - statuses[403]  # RequestThrottled
        assert served and set(served) == {200}, Counter(served)
        print(f"{10_000 / seconds:.0f} bad signatures a second; {len(served)} served meanwhile")


def test_conditions_on_transport_and_address_read_a_trusted_proxy_s_word(tmp_path: Path) -> None:
    with _node(tmp_path, "--auth-trustedproxies", "127.0.0.0/8") as node:
        alpha = credential(node.url, "alpha", "manage")
        beta = credential(node.url, "beta", "produce")
        with contextlib.closing(client(node.url, alpha)) as owner:
            url = owner.create_queue(QueueName="guarded")["QueueUrl"]
            statement = {
                "Effect": "Allow",
                "Principal": {"AWS": beta["account"]},
                "Action": "sqs:SendMessage",
                "Resource": "*",
                "Condition": {
                    "Bool": {"aws:SecureTransport": "true"},
                    "IpAddress": {"aws:SourceIp": "10.0.0.0/8"},
                },
            }
            policy = json.dumps({"Statement": [statement]})
            owner.set_queue_attributes(QueueUrl=url, Attributes={"Policy": policy})
        forwarded: dict[str, str] = {}

        def say(request: Any, **_: Any) -> None:  # what the proxy in front would add
            for name, value in forwarded.items():
                request.headers[name] = value

        with contextlib.closing(client(node.url, beta)) as sender:
            sender.meta.events.register("before-sign.sqs.SendMessage", say)
            send = {"QueueUrl": url, "MessageBody": "m"}
            for said in (
                {},
                {"X-Forwarded-Proto": "https"},
                {"X-Forwarded-Proto": "https", "X-Forwarded-For": "192.168.1.9"},
            ):
                forwarded.clear()
                forwarded.update(said)
                with pytest.raises(ClientError, match="AccessDenied"):
                    sender.send_message(**send)
            forwarded.update({"X-Forwarded-For": "203.0.113.7, 10.1.2.3"})
            assert sender.send_message(**send)["MessageId"]
