"""SNS's signatures, checked as a receiver checks them: the string to sign built here from
AWS's description, the signature verified with the certificate alone."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from dynamiq.core.push.signing import SigningKey, rotate_signing_key, signing_keys
from dynamiq.storage.lmdb import LmdbBackend

NOTIFICATION = {
    "Type": "Notification",
    "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
    "TopicArn": "arn:aws:sns:us-east-1:000000000000:orders",
    "Subject": "My First Message",
    "Message": "Hello world!\nA second line.",
    "Timestamp": "2026-11-25T12:00:00.000Z",
}
CONFIRMATION = {
    "Type": "SubscriptionConfirmation",
    "MessageId": "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
    "Token": "2336412f37f",
    "TopicArn": "arn:aws:sns:us-east-1:000000000000:orders",
    "Message": "You have chosen to subscribe to the topic.",
    "SubscribeURL": "http://127.0.0.1:8081/?Action=ConfirmSubscription&Token=2336412f37f",
    "Timestamp": "2026-11-25T12:00:00.000Z",
}


def string_to_sign(document: dict[str, Any]) -> bytes:
    """As AWS documents it: for a notification Message, MessageId, Subject (when there
    is one), Timestamp, TopicArn, Type; for a confirmation Message, MessageId,
    SubscribeURL, Timestamp, Token, TopicArn, Type; each name and value on a line."""
    if document["Type"] == "Notification":
        names = ["Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"]
    else:
        names = ["Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"]
    return "".join(f"{n}\n{document[n]}\n" for n in names if n in document).encode()


def verify(cert_pem: bytes, document: dict[str, Any], signature: str, version: str) -> bool:
    public = x509.load_pem_x509_certificate(cert_pem).public_key()
    assert isinstance(public, rsa.RSAPublicKey)
    digest = hashes.SHA1() if version == "1" else hashes.SHA256()
    try:
        public.verify(
            base64.b64decode(signature), string_to_sign(document), padding.PKCS1v15(), digest
        )
    except InvalidSignature:
        return False
    return True


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return SigningKey.make()


@pytest.mark.parametrize("version", ["1", "2"])
@pytest.mark.parametrize("document", [NOTIFICATION, CONFIRMATION])
def test_a_signature_verifies_with_the_certificate_alone(
    key: SigningKey, document: dict[str, Any], version: str
) -> None:
    signature = key.sign(document, version)
    assert verify(key.cert_pem, document, signature, version)
    assert not verify(key.cert_pem, {**document, "Message": "changed"}, signature, version)
    other = "2" if version == "1" else "1"
    assert not verify(key.cert_pem, document, signature, other)


def test_a_notification_without_a_subject_signs_without_one(key: SigningKey) -> None:
    plain = {k: v for k, v in NOTIFICATION.items() if k != "Subject"}
    assert verify(key.cert_pem, plain, key.sign(plain, "2"), "2")
    assert not verify(key.cert_pem, NOTIFICATION, key.sign(plain, "2"), "2")


async def test_every_node_reads_the_key_the_first_one_made(store: LmdbBackend) -> None:
    (first, none), (second, _) = await asyncio.gather(signing_keys(store), signing_keys(store))
    assert first == second and none is None
    again, _ = await signing_keys(store)
    assert again == first and again.sign(NOTIFICATION) == first.sign(NOTIFICATION)
    cert = x509.load_pem_x509_certificate(first.cert_pem)
    assert cert.not_valid_after_utc.year - cert.not_valid_before_utc.year >= 9


async def test_a_rotated_key_keeps_the_one_before(store: LmdbBackend) -> None:
    first, _ = await signing_keys(store)
    fresh = await rotate_signing_key(store)
    current, previous = await signing_keys(store)
    assert current == fresh and previous == first and fresh.key_id != first.key_id
    assert verify(fresh.cert_pem, NOTIFICATION, fresh.sign(NOTIFICATION), "1")
    assert not verify(first.cert_pem, NOTIFICATION, fresh.sign(NOTIFICATION), "1")
