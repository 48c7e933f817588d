"""Push subscriptions: a topic's messages POSTed to an HTTP/S endpoint (pure).

A push subscription is delivered through a queue of its own, internal to the
node (``push~<id>``: no API can name it, no listing shows it), subscribed to
the topic with the subscription's filter. A publish stores the copy there in
its own commit, so a 2xx means the endpoint will be tried even if the node
dies; whoever serves the copy's slice delivers it, its lease is the delivery
in flight and its receive count the attempt.

What the queue stores is SNS's document (``notifications``); what is POSTed
is that document with the fields that depend on where and when it is sent:
the links back to the cluster and the signature (``Documents``).
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any
from urllib.parse import quote

from dynamiq.core.push.signing import SigningKey
from dynamiq.push.request import Request

__all__ = [
    "PUSH_PREFIX",
    "Documents",
    "PushEndpoint",
    "confirmation",
    "push_queue",
    "subscription_id",
]

PUSH_PREFIX = "push~"  # no queue a client names has a "~"
USER_AGENT = "Amazon Simple Notification Service Agent"
PLAIN_TEXT = "text/plain; charset=UTF-8"  # SNS's Content-Type unless a policy says another
CONFIRM_TEXT = (
    "You have chosen to subscribe to the topic {arn}.\n"
    "To confirm the subscription, visit the SubscribeURL included in this message."
)


def push_queue(subscription: str | None = None) -> str:
    """The internal queue of a push subscription (a new one's without an id)."""
    return PUSH_PREFIX + (subscription or str(uuid.uuid4()))


def subscription_id(queue: str) -> str | None:
    """The subscription id an internal queue's name holds (None: not a push queue)."""
    return queue.removeprefix(PUSH_PREFIX) if queue.startswith(PUSH_PREFIX) else None


@dataclass(frozen=True, slots=True)
class PushEndpoint:
    """Where and how a push subscription delivers: ``protocol`` (http, https) and
    ``url``; its confirmation ``token`` and whether it was ``confirmed``; ``raw``
    bodies (``RawMessageDelivery``); its own ``delivery_policy`` (SNS's JSON, None:
    the topic's) and ``dead_letter`` queue; and when it was made."""

    protocol: str
    url: str
    token: str
    created_ms: int
    confirmed: bool = False
    raw: bool = False
    delivery_policy: str | None = None
    dead_letter: str | None = None

    @classmethod
    def new(cls, protocol: str, url: str, now_ms: int) -> PushEndpoint:
        return cls(protocol, url, secrets.token_hex(64), now_ms)

    def confirm(self) -> PushEndpoint:
        return replace(self, confirmed=True)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PushEndpoint:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def confirmation(topic_arn: str, endpoint: PushEndpoint, message_id: str, stamp: str) -> bytes:
    """The ``SubscriptionConfirmation`` a new subscription's queue holds first."""
    document = {
        "Type": "SubscriptionConfirmation",
        "MessageId": message_id,
        "Token": endpoint.token,
        "TopicArn": topic_arn,
        "Message": CONFIRM_TEXT.format(arn=topic_arn),
        "Timestamp": stamp,
    }
    return json.dumps(document).encode()


class Documents:
    """Turns a stored SNS document into the request an endpoint gets: the links back to
    the cluster at ``base`` (a URL), signed with ``key``."""

    def __init__(self, base: str, key: SigningKey) -> None:
        self.base = base.rstrip("/")
        self.key = key

    def cert_url(self) -> str:
        return f"{self.base}/sns/cert/{self.key.key_id}.pem"

    def subscribe_url(self, topic_arn: str, token: str) -> str:
        return f"{self.base}/sns/confirm?TopicArn={quote(topic_arn)}&Token={token}"

    def unsubscribe_url(self, subscription_arn: str) -> str:
        return f"{self.base}/sns/unsubscribe?SubscriptionArn={quote(subscription_arn)}"

    def request(
        self,
        stored: bytes,
        endpoint: PushEndpoint,
        subscription_arn: str,
        version: str = "1",
        content_type: str = PLAIN_TEXT,
    ) -> Request:
        """The POST carrying ``stored`` (an SNS document) to ``endpoint``: signed under
        ``SignatureVersion`` ``version``, or its bare ``Message`` for a raw endpoint. A
        notification carries ``content_type`` (the delivery policy's); a confirmation is
        plain text whatever the policy says, as SNS sends it."""
        stored_doc: dict[str, Any] = json.loads(stored)
        kind = stored_doc["Type"]
        notification = kind == "Notification"
        headers = {
            "Content-Type": content_type if notification else PLAIN_TEXT,
            "User-Agent": USER_AGENT,
            "x-amz-sns-message-type": kind,
            "x-amz-sns-message-id": stored_doc["MessageId"],
            "x-amz-sns-topic-arn": stored_doc["TopicArn"],
        }
        if notification:
            headers["x-amz-sns-subscription-arn"] = subscription_arn
            if endpoint.raw:
                headers["x-amz-sns-rawdelivery"] = "true"
                return Request(endpoint.url, headers, str(stored_doc["Message"]).encode())
        document = self.signed(stored_doc, subscription_arn, version)
        return Request(endpoint.url, headers, json.dumps(document).encode(), notification)

    def signed(self, stored: dict[str, Any], subscription_arn: str, version: str) -> dict[str, Any]:
        """``stored`` with its links and signature, its fields in SNS's order."""
        kind = stored["Type"]
        document = {k: v for k, v in stored.items() if k != "MessageAttributes"}
        if kind == "SubscriptionConfirmation":
            document["SubscribeURL"] = self.subscribe_url(stored["TopicArn"], stored["Token"])
            document["Timestamp"] = document.pop("Timestamp")  # after SubscribeURL, as SNS
        document["SignatureVersion"] = version
        document["Signature"] = self.key.sign(document, version)
        document["SigningCertURL"] = self.cert_url()
        if kind == "Notification":
            document["UnsubscribeURL"] = self.unsubscribe_url(subscription_arn)
            if "MessageAttributes" in stored:
                document["MessageAttributes"] = stored["MessageAttributes"]
        return document
