"""SigV4 verification against botocore's own signer: every signature here is made by
AWS's SDK (``SigV4Auth`` for headers, ``SigV4QueryAuth`` for presigned URLs), never by
hand, over SQS's JSON and query protocols and SNS's query protocol."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlsplit

import pytest
from botocore.auth import SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from dynamiq.access.sigv4 import MISMATCH, SignatureRefused, SignedRequest, verify

KEY_ID, SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
URL = "http://127.0.0.1:8081/"
JSON_BODY = json.dumps({"QueueName": "orders"}).encode()
JSON_HEADERS = {
    "Content-Type": "application/x-amz-json-1.0",
    "X-Amz-Target": "AmazonSQS.CreateQueue",
}
FORM_BODY = b"Action=CreateQueue&QueueName=orders&Version=2012-11-05"
FORM_HEADERS = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
SNS_BODY = b"Action=CreateTopic&Name=events&Version=2010-03-31"

PROTOCOLS = {
    "sqs-json": ("sqs", JSON_BODY, JSON_HEADERS),
    "sqs-query": ("sqs", FORM_BODY, FORM_HEADERS),
    "sns-query": ("sns", SNS_BODY, FORM_HEADERS),
}


def _secret(key_id: str) -> str | None:
    return SECRET if key_id == KEY_ID else None


def _signed(
    service: str,
    body: bytes,
    headers: dict[str, str],
    *,
    secret: str = SECRET,
    key_id: str = KEY_ID,
    region: str = "us-east-1",
    token: str | None = None,
    url: str = URL,
) -> AWSRequest:
    request = AWSRequest(method="POST", url=url, data=body, headers=dict(headers))
    SigV4Auth(Credentials(key_id, secret, token), service, region).add_auth(request)
    return request


def _arrived(request: AWSRequest) -> SignedRequest:
    """The request as a node receives it: raw path and query, headers, body."""
    prepared = request.prepare()
    parts = urlsplit(prepared.url)
    host = parts.netloc
    headers = [("Host", host), *((k, str(v)) for k, v in prepared.headers.items())]
    body = prepared.body if isinstance(prepared.body, bytes) else (prepared.body or "").encode()
    return SignedRequest(prepared.method, parts.path, parts.query, headers, body)


def _verify(request: SignedRequest, **options: Any) -> str:
    verified = verify(request, _secret, region="us-east-1", services=("sqs", "sns"), **options)
    return verified.access_key_id


def _refused(request: SignedRequest, code: str, **options: Any) -> str:
    with pytest.raises(SignatureRefused) as caught:
        _verify(request, **options)
    assert caught.value.code == code, caught.value.message
    return caught.value.message


@pytest.fixture(params=sorted(PROTOCOLS))
def protocol(request: pytest.FixtureRequest) -> tuple[str, bytes, dict[str, str]]:
    return PROTOCOLS[request.param]


def test_the_right_secret_is_served(protocol: tuple[str, bytes, dict[str, str]]) -> None:
    assert _verify(_arrived(_signed(*protocol))) == KEY_ID


def test_a_wrong_secret_is_refused(protocol: tuple[str, bytes, dict[str, str]]) -> None:
    message = _refused(_arrived(_signed(*protocol, secret="x" * 40)), "SignatureDoesNotMatch")
    assert message == MISMATCH


def test_an_unknown_key_is_refused(protocol: tuple[str, bytes, dict[str, str]]) -> None:
    arrived = _arrived(_signed(*protocol, key_id="AKIAUNKNOWNKEY000000"))
    message = _refused(arrived, "InvalidClientTokenId")
    assert message == "The security token included in the request is invalid."


def test_a_session_token_is_refused_until_there_is_an_sts(
    protocol: tuple[str, bytes, dict[str, str]],
) -> None:
    _refused(_arrived(_signed(*protocol, token="FwoGZXIvYXdzE")), "InvalidClientTokenId")


def test_a_tampered_body_is_refused(protocol: tuple[str, bytes, dict[str, str]]) -> None:
    arrived = _arrived(_signed(*protocol))
    tampered = SignedRequest(
        arrived.method, arrived.path, arrived.query, arrived.headers, arrived.body + b"x"
    )
    _refused(tampered, "SignatureDoesNotMatch")


def test_a_tampered_signed_header_is_refused() -> None:
    arrived = _arrived(_signed(*PROTOCOLS["sqs-json"]))
    headers = [
        (k, "AmazonSQS.DeleteQueue" if k.lower() == "x-amz-target" else v)
        for k, v in arrived.headers
    ]
    tampered = SignedRequest(arrived.method, arrived.path, arrived.query, headers, arrived.body)
    _refused(tampered, "SignatureDoesNotMatch")


def test_header_values_are_trimmed_and_folded_as_aws_does() -> None:
    arrived = _arrived(_signed("sqs", JSON_BODY, {**JSON_HEADERS, "X-Custom": "a   b"}))
    spaced = [
        (k, f"  {v.replace(' ', '  ')}  ") if k == "X-Custom" else (k, v)
        for k, v in arrived.headers
    ]
    assert _verify(SignedRequest(arrived.method, arrived.path, arrived.query, spaced, arrived.body))


def test_a_request_without_its_date_header_is_refused() -> None:
    arrived = _arrived(_signed(*PROTOCOLS["sqs-query"]))
    headers = [(k, v) for k, v in arrived.headers if k.lower() != "x-amz-date"]
    bare = SignedRequest(arrived.method, arrived.path, arrived.query, headers, arrived.body)
    _refused(bare, "SignatureDoesNotMatch")


def test_a_signature_that_does_not_sign_host_is_refused() -> None:
    arrived = _arrived(_signed(*PROTOCOLS["sqs-query"]))
    headers = [
        (
            k,
            v.replace(
                "SignedHeaders=content-type;host;x-amz-date",
                "SignedHeaders=content-type;x-amz-date",
            ),
        )
        for k, v in arrived.headers
    ]
    message = _refused(
        SignedRequest(arrived.method, arrived.path, arrived.query, headers, arrived.body),
        "SignatureDoesNotMatch",
    )
    assert "'Host' must be a 'SignedHeader'" in message


def test_unsigned_payload_is_refused() -> None:
    headers = {**JSON_HEADERS, "X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"}
    message = _refused(_arrived(_signed("sqs", JSON_BODY, headers)), "SignatureDoesNotMatch")
    assert "UNSIGNED-PAYLOAD" in message


@pytest.mark.parametrize("minutes", [16, -16])
def test_a_request_dated_16_minutes_off_is_refused(minutes: int) -> None:
    arrived = _arrived(_signed(*PROTOCOLS["sqs-json"]))
    message = _refused(arrived, "SignatureDoesNotMatch", now=time.time() + minutes * 60)
    expected = "Signature expired: " if minutes > 0 else "Signature not yet current: "
    assert message.startswith(expected)
    assert message.endswith(" - 15 min.)" if minutes > 0 else " + 15 min.)")


def test_a_request_dated_14_minutes_off_is_served() -> None:
    arrived = _arrived(_signed(*PROTOCOLS["sqs-json"]))
    assert _verify(arrived, now=time.time() + 14 * 60)
    assert _verify(arrived, now=time.time() - 14 * 60)


def test_a_wrong_region_is_refused() -> None:
    arrived = _arrived(_signed(*PROTOCOLS["sqs-json"], region="eu-west-1"))
    message = _refused(arrived, "SignatureDoesNotMatch")
    assert message == "Credential should be scoped to a valid region, not 'eu-west-1'."


def test_a_wrong_service_is_refused() -> None:
    arrived = _arrived(_signed("dynamodb", JSON_BODY, JSON_HEADERS))
    assert "scoped to correct service" in _refused(arrived, "SignatureDoesNotMatch")


def test_no_signature_at_all_is_refused() -> None:
    bare = SignedRequest("POST", "/", "", [("Host", "127.0.0.1:8081")], FORM_BODY)
    assert _refused(bare, "MissingAuthenticationToken") == "Request is missing Authentication Token"


@pytest.mark.parametrize(
    "authorization",
    [
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20261207/us-east-1/sqs/aws4_request",
        "AWS4-HMAC-SHA256 Signature=00, SignedHeaders=host",
        "AWS4-HMAC-SHA256 Credential=AKIA/x, SignedHeaders=host, Signature=00",
        "AWS AKIAIOSFODNN7EXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=",
        "",
        "AWS4-HMAC-SHA256 " + "Credential=" * 10_000,
    ],
)
def test_a_malformed_authorization_header_is_refused(authorization: str) -> None:
    headers = [("Host", "127.0.0.1:8081"), ("Authorization", authorization)]
    message = _refused(SignedRequest("POST", "/", "", headers, FORM_BODY), "IncompleteSignature")
    assert len(message) < 600


def _presigned(expires: int) -> SignedRequest:
    url = URL + "?Action=ListQueues&Version=2012-11-05"
    request = AWSRequest(method="GET", url=url)
    SigV4QueryAuth(Credentials(KEY_ID, SECRET), "sqs", "us-east-1", expires=expires).add_auth(
        request
    )
    return _arrived(request)


def test_a_presigned_url_is_served_until_it_expires() -> None:
    arrived = _presigned(60)
    assert _verify(arrived) == KEY_ID
    assert _verify(arrived, now=time.time() + 50) == KEY_ID
    message = _refused(arrived, "SignatureDoesNotMatch", now=time.time() + 70)
    assert message.startswith("Signature expired: ")


def test_a_presigned_url_is_refused_where_they_are_off() -> None:
    _refused(_presigned(60), "IncompleteSignature", presigned=False)


def test_a_presigned_url_with_its_query_changed_is_refused() -> None:
    arrived = _presigned(60)
    changed = arrived.query.replace("ListQueues", "PurgeQueue")
    tampered = SignedRequest(arrived.method, arrived.path, changed, arrived.headers, arrived.body)
    _refused(tampered, "SignatureDoesNotMatch")
