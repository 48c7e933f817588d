"""SNS's signatures checked the way AWS documents it ("Verifying the signatures of Amazon
SNS messages"), written here independently of the node's code."""

from __future__ import annotations

import base64
import urllib.request
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

__all__ = ["verify"]

# What each kind of document signs, in this order (AWS's "Verifying the signatures of
# Amazon SNS messages"): each key on a line, its value on the next.
SIGNED = {
    "Notification": ["Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"],
    "SubscriptionConfirmation": [
        "Message",
        "MessageId",
        "SubscribeURL",
        "Timestamp",
        "Token",
        "TopicArn",
        "Type",
    ],
}


def verify(document: dict[str, Any], pem: bytes | None = None) -> x509.Certificate:
    """Check ``document``'s signature with the certificate fetched from its
    ``SigningCertURL`` (or ``pem``, fetched so by the caller); return the certificate."""
    if pem is None:
        with urllib.request.urlopen(document["SigningCertURL"], timeout=10) as answer:
            pem = answer.read()
    cert = x509.load_pem_x509_certificate(pem)
    text = "".join(
        f"{key}\n{document[key]}\n" for key in SIGNED[document["Type"]] if key in document
    )
    digest = {"1": hashes.SHA1(), "2": hashes.SHA256()}[document["SignatureVersion"]]
    key = cert.public_key()
    assert isinstance(key, rsa.RSAPublicKey)
    key.verify(base64.b64decode(document["Signature"]), text.encode(), padding.PKCS1v15(), digest)
    return cert
