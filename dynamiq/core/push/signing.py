"""Signed SNS documents: the cluster's signing key, its certificate, and SNS's signatures.

SNS signs every document it delivers (a notification, a subscription's or an
unsubscription's confirmation) so that a receiver can tell it came from the
topic's service: a canonical string of some of its fields, signed with RSA
over SHA-1 (``SignatureVersion`` 1) or SHA-256 (2), in base64, checked with
the certificate at ``SigningCertURL``.

The cluster shares one key: the first node to start makes it (RSA 2048, a
self-signed certificate valid for ten years) and keeps it in the store's
configuration, where every other node reads it. Its id names its
certificate's URL, so a receiver caching certificates by URL notices a new
key.
"""

from __future__ import annotations

import base64
import datetime
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from dynamiq.storage.base import StorageBackend

__all__ = ["SIGNED_FIELDS", "SigningKey", "canonical", "rotate_signing_key", "signing_keys"]

SIGNING_KEY = "sns/signing"  # where the store keeps it
PREVIOUS_KEY = "sns/signing-previous"  # the one before a rotation: its certificate stays served
# The fields each kind of document signs, in the order they are signed.
SIGNED_FIELDS: dict[str, tuple[str, ...]] = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": (
        "Message",
        "MessageId",
        "SubscribeURL",
        "Timestamp",
        "Token",
        "TopicArn",
        "Type",
    ),
}
SIGNED_FIELDS["UnsubscribeConfirmation"] = SIGNED_FIELDS["SubscriptionConfirmation"]
_HASHES = {"1": hashes.SHA1, "2": hashes.SHA256}
_YEARS = 10


def canonical(document: Mapping[str, object]) -> bytes:
    """The string SNS signs for ``document``: each signed field it has, as its name and
    its value, each on a line of its own."""
    fields = SIGNED_FIELDS[str(document["Type"])]
    lines = [f"{name}\n{document[name]}\n" for name in fields if name in document]
    return "".join(lines).encode()


@dataclass(frozen=True, slots=True)
class SigningKey:
    """An RSA key and its self-signed certificate (PEM), named by ``key_id``."""

    key_id: str
    key_pem: bytes
    cert_pem: bytes
    _key: rsa.RSAPrivateKey = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError("the signing key is not an RSA key")
        object.__setattr__(self, "_key", key)

    @classmethod
    def make(cls, common_name: str = "sns.dynamiq") -> SigningKey:
        """A new key and a certificate for it."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=365 * _YEARS))
            .sign(key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return cls(secrets.token_hex(16), key_pem, cert.public_bytes(serialization.Encoding.PEM))

    def encode(self) -> bytes:
        return json.dumps(
            {"id": self.key_id, "key": self.key_pem.decode(), "cert": self.cert_pem.decode()}
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> SigningKey:
        data = json.loads(raw)
        return cls(data["id"], data["key"].encode(), data["cert"].encode())

    def sign(self, document: Mapping[str, object], version: str = "1") -> str:
        """``document``'s signature (base64) under ``SignatureVersion`` ``version``."""
        signed = self._key.sign(canonical(document), padding.PKCS1v15(), _HASHES[version]())
        return base64.b64encode(signed).decode()


async def signing_keys(store: StorageBackend) -> tuple[SigningKey, SigningKey | None]:
    """The cluster's signing key (the one the store keeps, made by the first node to ask)
    and the one before it, if it was rotated."""
    if await store.meta_get(SIGNING_KEY) is None:
        await store.meta_create(SIGNING_KEY, SigningKey.make().encode())  # one node wins
    raw = await store.meta_get(SIGNING_KEY)
    assert raw is not None  # made just now, or before
    previous = await store.meta_get(PREVIOUS_KEY)
    return SigningKey.decode(raw), None if previous is None else SigningKey.decode(previous)


async def rotate_signing_key(store: StorageBackend) -> SigningKey:
    """Make a new signing key for the cluster; the current one becomes the previous (its
    certificate stays served, for what it signed that is still being checked)."""
    current, _ = await signing_keys(store)
    fresh = SigningKey.make()
    await store.meta_put({SIGNING_KEY: fresh.encode(), PREVIOUS_KEY: current.encode()})
    return fresh
