"""The SQS and SNS endpoint behind SigV4: every signature made by AWS's own signers (boto3,
botocore 1.31's query-protocol client, botocore's ``SigV4Auth`` and presigner) with the
credentials the node issues, and every refusal in AWS's code and words on each protocol."""

from __future__ import annotations

import contextlib
import datetime
import html
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import NodeProcess
from tests.servers import require_module, require_path
from tests.sqs.conftest import run_js
from tests.sqs.signed import QUERY_MODELS, client, credential, fetch, keyed_node, v2

require_module("boto3", "test")

from botocore.auth import SigV4Auth, SigV4QueryAuth  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402

MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. "
    "Consult the service documentation for details."
)
JSON_HEADERS = {
    "Content-Type": "application/x-amz-json-1.0",
    "X-Amz-Target": "AmazonSQS.ListQueues",
}
JSON_BODY = b"{}"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    # Failing signatures are many here, from one address: none is held back.
    started = keyed_node(Path(tmp_path_factory.mktemp("signed")), "--auth-failedburst", "100000")
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def made(node: NodeProcess) -> dict[str, Any]:
    return credential(node.url, "shop", "manage")


# One client of each protocol: SQS's JSON (boto3), SQS's query (botocore 1.31), SNS's query.
def _sqs_json(url: str, made: dict[str, Any], **extra: Any) -> Any:
    return client(url, made, **extra)


def _sqs_query(url: str, made: dict[str, Any], **extra: Any) -> Any:
    require_path(QUERY_MODELS / "sqs", "setup.sh fetches botocore 1.31's SQS model")
    return client(url, made, query=True, **extra)


def _sns(url: str, made: dict[str, Any], **extra: Any) -> Any:
    return client(url, made, "sns", **extra)


PROTOCOLS: dict[str, tuple[Callable[..., Any], Callable[[Any], Any]]] = {
    "sqs-json": (_sqs_json, lambda c: c.list_queues()),
    "sqs-query": (_sqs_query, lambda c: c.list_queues()),
    "sns-query": (_sns, lambda c: c.list_topics()),
}


@pytest.fixture(params=sorted(PROTOCOLS))
def protocol(request: pytest.FixtureRequest) -> tuple[Callable[..., Any], Callable[[Any], Any]]:
    return PROTOCOLS[request.param]


Protocol = tuple[Callable[..., Any], Callable[[Any], Any]]


def _refused(protocol: Protocol, url: str, made: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The error a call of ``protocol``'s signed as ``made`` (and ``extra``) gets."""
    make, call = protocol
    with (
        contextlib.closing(make(url, made, **extra)) as signing,
        pytest.raises(ClientError) as caught,
    ):
        call(signing)
    return dict(caught.value.response["Error"]) | {
        "status": caught.value.response["ResponseMetadata"]["HTTPStatusCode"]
    }


def test_the_right_secret_is_served_on_each_protocol(
    node: NodeProcess, made: dict[str, Any]
) -> None:
    name = f"signed-{uuid.uuid4().hex[:8]}"
    with contextlib.closing(_sqs_json(node.url, made)) as sqs:
        url = sqs.create_queue(QueueName=name)["QueueUrl"]
        assert urlsplit(url).path == f"/{made['account']}/{name}"  # the application's account
        sqs.send_message(QueueUrl=url, MessageBody="signed")
        assert url in sqs.list_queues()["QueueUrls"]
    with contextlib.closing(_sqs_query(node.url, made)) as query:
        got = query.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
        assert [m["Body"] for m in got] == ["signed"]
        query.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    with contextlib.closing(_sns(node.url, made)) as sns:
        arn = sns.create_topic(Name=name)["TopicArn"]
        assert arn == f"arn:aws:sns:us-east-1:{made['account']}:{name}"
        sns.publish(TopicArn=arn, Message="hello")
    # v2 sees them in the application's namespace.
    assert f"shop:{name}" in v2(node.url, "GET", "/v2/queues")["queues"]


def test_a_wrong_secret_is_refused(
    node: NodeProcess, made: dict[str, Any], protocol: Protocol
) -> None:
    error = _refused(protocol, node.url, made, secret="x" * 40)
    assert (error["Code"], error["Message"], error["status"]) == (
        "SignatureDoesNotMatch",
        MISMATCH,
        403,
    )


def test_an_unknown_key_id_is_refused(
    node: NodeProcess, made: dict[str, Any], protocol: Protocol
) -> None:
    unknown = {**made, "access_key_id": "AKIAUNKNOWNKEY000000"}
    error = _refused(protocol, node.url, unknown)
    assert (error["Code"], error["status"]) == ("InvalidClientTokenId", 403)
    assert error["Message"] == "The security token included in the request is invalid."


def test_a_revoked_key_is_refused_at_once(node: NodeProcess, protocol: Protocol) -> None:
    made = credential(node.url, "shop", "produce")
    make, call = protocol
    with contextlib.closing(make(node.url, made)) as signing:
        call(signing)
    v2(node.url, "DELETE", f"/v2/keys/{made['key_id']}")
    error = _refused(protocol, node.url, made)
    assert (error["Code"], error["status"]) == ("InvalidClientTokenId", 403)


def test_a_session_token_is_refused_until_the_node_has_an_sts(
    node: NodeProcess, made: dict[str, Any], protocol: Protocol
) -> None:
    error = _refused(protocol, node.url, made, aws_session_token="FwoGZXIvYXdzEXAMPLE")
    assert (error["Code"], error["status"]) == ("InvalidClientTokenId", 403)


def test_a_wrong_region_is_refused(
    node: NodeProcess, made: dict[str, Any], protocol: Protocol
) -> None:
    error = _refused(protocol, node.url, made, region="eu-west-1")
    assert error["Code"] == "SignatureDoesNotMatch"
    assert error["Message"] == "Credential should be scoped to a valid region, not 'eu-west-1'."


@pytest.mark.parametrize("minutes", [16, -16])
def test_a_request_dated_16_minutes_off_is_refused(
    node: NodeProcess,
    made: dict[str, Any],
    protocol: Protocol,
    minutes: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shifted = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=minutes)
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: shifted)
    error = _refused(protocol, node.url, made)
    assert (error["Code"], error["status"]) == ("SignatureDoesNotMatch", 403)
    said = "Signature not yet current: " if minutes > 0 else "Signature expired: "
    assert error["Message"].startswith(said)
    assert error["Message"].endswith(" + 15 min.)" if minutes > 0 else " - 15 min.)")


def _signed(
    url: str,
    made: dict[str, Any],
    service: str = "sqs",
    body: bytes = JSON_BODY,
    headers: dict[str, str] | None = None,
) -> AWSRequest:
    request = AWSRequest(
        method="POST",
        url=url + "/",
        data=body,
        headers=dict(JSON_HEADERS if headers is None else headers),
    )
    credentials = Credentials(made["access_key_id"], made["secret_access_key"])
    SigV4Auth(credentials, service, "us-east-1").add_auth(request)
    return request


def _sent(request: AWSRequest, **changes: Any) -> tuple[int, dict[str, str], bytes]:
    """Send a signed request, with ``changes`` made after it was signed (``headers``
    changed, ``without`` some, another ``body``: its length is sent as it is)."""
    prepared = request.prepare()
    headers = {k: str(v) for k, v in prepared.headers.items() if k.lower() != "content-length"}
    headers.update(changes.pop("headers", {}))
    for name in changes.pop("without", ()):
        headers.pop(name)
    body = changes.pop("body", prepared.body)
    return fetch(prepared.url, "POST", body, headers)


def _code(answer: tuple[int, dict[str, str], bytes]) -> tuple[int, str]:
    status, headers, _ = answer
    return status, headers.get("x-amzn-query-error", "")


FORM = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
# Each protocol's request, as SigV4Auth signs it: service, body, headers.
RAW: dict[str, tuple[str, bytes, dict[str, str]]] = {
    "sqs-json": ("sqs", JSON_BODY, JSON_HEADERS),
    "sqs-query": ("sqs", b"Action=ListQueues&Version=2012-11-05", FORM),
    "sns-query": ("sns", b"Action=ListTopics&Version=2010-03-31", FORM),
}


@pytest.fixture(params=sorted(RAW))
def raw(request: pytest.FixtureRequest) -> tuple[str, bytes, dict[str, str]]:
    return RAW[request.param]


def _raw_signed(
    url: str, made: dict[str, Any], raw: tuple[str, bytes, dict[str, str]], **extra: str
) -> AWSRequest:
    service, body, headers = raw
    return _signed(url, made, service, body, {**headers, **extra})


def _refusal(answer: tuple[int, dict[str, str], bytes]) -> tuple[int, str, str]:
    """An answer's status, code and message, from either protocol's error."""
    status, headers, body = answer
    if "x-amzn-query-error" in headers:
        said = json.loads(body)
        return status, headers["x-amzn-query-error"].split(";")[0], said["message"]
    code = re.search(rb"<Code>(.*?)</Code>", body)
    message = re.search(rb"<Message>(.*?)</Message>", body, re.DOTALL)
    assert code is not None and message is not None, body
    return status, code[1].decode(), html.unescape(message[1].decode())


def test_signed_raw_requests_are_served(
    node: NodeProcess, made: dict[str, Any], raw: tuple[str, bytes, dict[str, str]]
) -> None:
    status, headers, _ = _sent(_raw_signed(node.url, made, raw))
    assert status == 200
    assert "Date" in headers  # the JavaScript SDK sets its clock by it


def test_a_tampered_body_is_refused(
    node: NodeProcess, made: dict[str, Any], raw: tuple[str, bytes, dict[str, str]]
) -> None:
    answer = _sent(_raw_signed(node.url, made, raw), body=raw[1] + b"&x=1")
    assert _refusal(answer) == (403, "SignatureDoesNotMatch", MISMATCH)
    answer = _sent(_raw_signed(node.url, made, raw), body=raw[1][:-1] + b"X")  # as long
    assert _refusal(answer) == (403, "SignatureDoesNotMatch", MISMATCH)


def test_a_tampered_signed_header_is_refused(
    node: NodeProcess, made: dict[str, Any], raw: tuple[str, bytes, dict[str, str]]
) -> None:
    signed = _raw_signed(node.url, made, raw, **{"X-Custom": "signed"})
    answer = _sent(signed, headers={"X-Custom": "changed"})
    assert _refusal(answer) == (403, "SignatureDoesNotMatch", MISMATCH)


def test_a_missing_signed_header_is_refused(
    node: NodeProcess, made: dict[str, Any], raw: tuple[str, bytes, dict[str, str]]
) -> None:
    answer = _sent(_raw_signed(node.url, made, raw, **{"X-Custom": "signed"}), without=["X-Custom"])
    assert _refusal(answer) == (403, "SignatureDoesNotMatch", MISMATCH)
    answer = _sent(_raw_signed(node.url, made, raw), without=["X-Amz-Date"])
    assert _refusal(answer)[:2] == (403, "SignatureDoesNotMatch")


def test_unsigned_payload_is_refused(
    node: NodeProcess, made: dict[str, Any], raw: tuple[str, bytes, dict[str, str]]
) -> None:
    signed = _raw_signed(node.url, made, raw, **{"X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"})
    status, code, message = _refusal(_sent(signed))
    assert (status, code) == (403, "SignatureDoesNotMatch") and "UNSIGNED-PAYLOAD" in message


def test_a_wrong_service_is_refused(node: NodeProcess, made: dict[str, Any]) -> None:
    status, headers, body = _sent(_signed(node.url, made, service="sns"))
    assert (status, headers["x-amzn-query-error"]) == (403, "SignatureDoesNotMatch;Sender")
    assert b"Credential should be scoped to correct service: 'sqs'." in body
    sns_form = b"Action=ListTopics&Version=2010-03-31"
    form = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
    status, _, body = _sent(_signed(node.url, made, body=sns_form, headers=form))
    assert status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in body
    assert b"scoped to correct service: &apos;sns&apos;" in body or b"'sns'" in body


def test_no_signature_is_refused_on_each_protocol(node: NodeProcess) -> None:
    status, headers, body = fetch(node.url + "/", "POST", JSON_BODY, JSON_HEADERS)
    assert (status, headers["x-amzn-query-error"]) == (403, "MissingAuthenticationToken;Sender")
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    for action in (b"Action=ListQueues", b"Action=ListTopics"):
        status, _, body = fetch(node.url + "/", "POST", action, form)
        assert status == 403 and b"<Code>MissingAuthenticationToken</Code>" in body


def _presigned(
    url: str,
    made: dict[str, Any],
    service: str,
    action: str,
    expires: int,
    ago: int = 0,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> str:
    version = "2010-03-31" if service == "sns" else "2012-11-05"
    request = AWSRequest(method="GET", url=f"{url}/?Action={action}&Version={version}")
    credentials = Credentials(made["access_key_id"], made["secret_access_key"])
    if ago and monkeypatch is not None:
        then = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=ago)
        monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: then)
    SigV4QueryAuth(credentials, service, "us-east-1", expires=expires).add_auth(request)
    return str(request.prepare().url)


@pytest.mark.parametrize(("service", "action"), [("sqs", "ListQueues"), ("sns", "ListTopics")])
def test_a_presigned_url_is_served_until_it_expires(
    node: NodeProcess,
    made: dict[str, Any],
    service: str,
    action: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    status, _, body = fetch(_presigned(node.url, made, service, action, 60))
    assert status == 200 and f"<{action}Response".encode() in body
    expired = _presigned(node.url, made, service, action, 60, ago=120, monkeypatch=monkeypatch)
    status, _, body = fetch(expired)
    assert status == 403 and b"<Code>SignatureDoesNotMatch</Code>" in body
    assert b"Signature expired: " in body and b" - 60 sec.)" in body


def test_the_sdk_presigner_s_url_is_served(node: NodeProcess, made: dict[str, Any]) -> None:
    # botocore presigns an action with its own method: SQS's and SNS's are POSTs.
    with contextlib.closing(_sqs_query(node.url, made)) as query:
        url = query.generate_presigned_url("list_queues", ExpiresIn=60)
    assert fetch(url)[0] == 403  # as a GET, it is not what was signed
    status, _, body = fetch(url, "POST", b"")
    assert status == 200 and b"<ListQueuesResponse" in body


def test_a_page_of_another_site_cannot_use_a_presigned_url(
    node: NodeProcess, made: dict[str, Any]
) -> None:
    url = _presigned(node.url, made, "sqs", "ListQueues", 60)
    status, _, _ = fetch(url, headers={"Sec-Fetch-Site": "cross-site"})
    assert status == 403


def test_the_console_is_still_served_at_the_root(node: NodeProcess) -> None:
    status, _, body = fetch(node.url + "/")
    assert status == 200 and b"<html" in body.lower()


def test_the_javascript_sdk_signs_and_sets_its_clock_by_the_node(
    node: NodeProcess, made: dict[str, Any]
) -> None:
    name = f"js-signed-{uuid.uuid4().hex[:8]}"
    seen = run_js("signed.mjs", node.url, name, made["access_key_id"], made["secret_access_key"])
    assert seen["queueUrl"].endswith(f"/{made['account']}/{name}")
    assert seen["bodies"] == ["signed in JavaScript"]
    assert seen["wrongSecret"]["name"] == "SignatureDoesNotMatch"
    assert seen["wrongSecret"]["status"] == 403
    # A clock 20 minutes ahead: refused once, then the SDK sets its clock by Date, served.
    assert seen["skewedListed"] == [seen["queueUrl"]]
    assert seen["skewedAttempts"] == 2
    assert abs(seen["offsetAfter"] + 20 * 60_000) < 60_000


def _aws(node: NodeProcess, made: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": made["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": made["secret_access_key"],
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    command = [
        str(Path(sys.prefix) / "bin" / "aws"),
        "--endpoint-url",
        node.url,
        "--output",
        "json",
    ]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def test_the_aws_command_line_signs_with_the_node_s_credential(
    node: NodeProcess, made: dict[str, Any]
) -> None:
    name = f"cli-signed-{uuid.uuid4().hex[:8]}"
    done = _aws(node, made, "sqs", "create-queue", "--queue-name", name)
    assert done.returncode == 0, done.stderr
    url = json.loads(done.stdout)["QueueUrl"]
    assert url.endswith(f"/{made['account']}/{name}")
    done = _aws(node, made, "sns", "create-topic", "--name", name)
    assert done.returncode == 0, done.stderr
    refused = _aws(node, {**made, "secret_access_key": "x" * 40}, "sqs", "list-queues")
    assert refused.returncode != 0
    assert "SignatureDoesNotMatch" in refused.stderr
    refused = _aws(node, {**made, "access_key_id": "AKIAUNKNOWNKEY000000"}, "sns", "list-topics")
    assert "InvalidClientTokenId" in refused.stderr
