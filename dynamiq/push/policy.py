"""SNS's delivery policies for HTTP/S endpoints: read, held to AWS's limits, completed
with its defaults, and turned into the delays between retries (pure).

A retry policy has four phases after the first attempt: ``numNoDelayRetries``
at once, ``numMinDelayRetries`` ``minDelayTarget`` apart, a backoff phase
whose delays grow from ``minDelayTarget`` to ``maxDelayTarget`` by
``backoffFunction``, and ``numMaxDelayRetries`` ``maxDelayTarget`` apart;
``numRetries`` counts them all, and together they may not take more than an
hour. AWS draws its four backoff functions but does not define them; here,
with ``t`` going from 0 to 1 over the backoff phase: linear grows the delay
evenly, arithmetic with ``t²``, geometric by a constant factor, and
exponential by doubling steps.

A topic's policy is ``{"http": {"defaultHealthyRetryPolicy", "defaultThrottlePolicy",
"defaultRequestPolicy", "disableSubscriptionOverrides"}}``; a subscription's
is ``{"healthyRetryPolicy", "throttlePolicy", "requestPolicy"}``. A refusal
is ``Invalid`` naming what is wrong, as SNS says it after ``DeliveryPolicy:``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from dynamiq.errors import Invalid

__all__ = [
    "BACKOFF_FUNCTIONS",
    "MAX_RETRY_SECONDS",
    "DeliveryRules",
    "RetryPolicy",
    "delivery_rules",
    "effective_subscription_policy",
    "effective_topic_policy",
    "shown_policy",
    "subscription_policy",
    "topic_policy",
]

BACKOFF_FUNCTIONS = ("linear", "arithmetic", "geometric", "exponential")
MAX_RETRY_SECONDS = 3600  # AWS's hard limit on a policy's retries, all phases together
MAX_RETRIES = 100
CONTENT_TYPES = ("text/plain", "application/json", "application/xml", "text/xml")
DEFAULT_CONTENT_TYPE = "text/plain; charset=UTF-8"
MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*", re.IGNORECASE)


def _refuse(what: str) -> Invalid:
    return Invalid(what, "DeliveryPolicy")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A ``healthyRetryPolicy`` with AWS's defaults (three retries 20 s apart), its
    fields named as SNS's JSON names them."""

    minDelayTarget: int = 20
    maxDelayTarget: int = 20
    numRetries: int = 3
    numMaxDelayRetries: int = 0
    numNoDelayRetries: int = 0
    numMinDelayRetries: int = 0
    backoffFunction: str = "linear"

    @classmethod
    def read(cls, given: object, where: str) -> RetryPolicy:
        """The policy ``given`` says (what it leaves out, AWS's defaults), checked."""
        if not isinstance(given, dict):
            raise _refuse(f"{where} must be an object")
        known = set(cls.__dataclass_fields__)
        for name in given:
            if name not in known:
                raise _refuse(f"{where}.{name} is not a retry policy field")
        values = {**asdict(cls()), **given}
        for name, value in values.items():
            if name == "backoffFunction":
                if value not in BACKOFF_FUNCTIONS:
                    raise _refuse(
                        f"{where}.backoffFunction is one of {', '.join(BACKOFF_FUNCTIONS)}"
                    )
            elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _refuse(f"{where}.{name} must be a whole number, 0 or more")
        policy = cls(**values)
        policy._check(where)
        return policy

    def _check(self, where: str) -> None:
        if not 1 <= self.minDelayTarget <= self.maxDelayTarget <= MAX_RETRY_SECONDS:
            raise _refuse(
                f"{where}: 1 <= minDelayTarget <= maxDelayTarget <= {MAX_RETRY_SECONDS} seconds"
            )
        if self.numRetries > MAX_RETRIES:
            raise _refuse(f"{where}.numRetries is at most {MAX_RETRIES}")
        phases = self.numNoDelayRetries + self.numMinDelayRetries + self.numMaxDelayRetries
        if phases > self.numRetries:
            raise _refuse(
                f"{where}: numNoDelayRetries, numMinDelayRetries and numMaxDelayRetries "
                "add up to more than numRetries"
            )
        if sum(self.delays()) > MAX_RETRY_SECONDS:
            raise _refuse(f"{where}: the retries take more than {MAX_RETRY_SECONDS} seconds")

    def delays(self) -> list[float]:
        """The seconds before each retry, in order (``numRetries`` of them)."""
        low, high = float(self.minDelayTarget), float(self.maxDelayTarget)
        backoff = (
            self.numRetries
            - self.numNoDelayRetries
            - self.numMinDelayRetries
            - self.numMaxDelayRetries
        )
        grown = [self._grown(low, high, (i + 1) / backoff) for i in range(backoff)]
        return [
            *[0.0] * self.numNoDelayRetries,
            *[low] * self.numMinDelayRetries,
            *grown,
            *[high] * self.numMaxDelayRetries,
        ]

    def _grown(self, low: float, high: float, t: float) -> float:
        """A backoff delay at ``t`` (0 to 1) of the way from ``low`` to ``high``."""
        match self.backoffFunction:
            case "arithmetic":
                return low + (high - low) * t * t
            case "geometric":
                return low * math.pow(high / low, t)
            case "exponential":
                return low + (high - low) * (math.pow(2, 10 * t) - 1) / (math.pow(2, 10) - 1)
            case _:
                return low + (high - low) * t


def _throttle(given: object, where: str) -> dict[str, int]:
    if not isinstance(given, dict) or set(given) - {"maxReceivesPerSecond"}:
        raise _refuse(f"{where} holds only maxReceivesPerSecond")
    rate = given.get("maxReceivesPerSecond", 1)
    if isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
        raise _refuse(f"{where}.maxReceivesPerSecond must be a whole number, 1 or more")
    return dict(given)


def _request(given: object, where: str) -> dict[str, str]:
    if not isinstance(given, dict) or set(given) - {"headerContentType"}:
        raise _refuse(f"{where} holds only headerContentType")
    kind = given.get("headerContentType", DEFAULT_CONTENT_TYPE)
    # AWS documents CONTENT_TYPES, and takes other media types too (text/csv, recorded).
    if not isinstance(kind, str) or not MEDIA_TYPE.fullmatch(kind.partition(";")[0].strip()):
        raise _refuse(f"{where}.headerContentType must be a media type, such as {CONTENT_TYPES[1]}")
    return dict(given)


def _document(text: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except (ValueError, RecursionError, TypeError):
        raise _refuse("not a JSON document") from None
    if not isinstance(document, dict):
        raise _refuse("must be a JSON object")
    return document


# A policy's parts and what checks each (a topic's are ``default`` and the part's name).
_PARTS: dict[str, Callable[[object, str], object]] = {
    "healthyRetryPolicy": RetryPolicy.read,
    "throttlePolicy": _throttle,
    "requestPolicy": _request,
}


def topic_policy(text: str) -> dict[str, Any]:
    """A topic's ``DeliveryPolicy``, checked.

    Raises:
        Invalid: not a JSON object, or a part of it breaks AWS's rules.
    """
    document = _document(text)
    http = document.get("http", {})
    if not isinstance(http, dict):
        raise _refuse("http must be an object")
    _check_parts(http, "http.", topic=True)
    return document


def effective_topic_policy(document: Mapping[str, Any]) -> dict[str, Any]:
    """What a topic's deliveries follow: its policy, AWS's defaults where it says nothing."""
    http = dict(document.get("http") or {})
    retry = RetryPolicy.read(http.get("defaultHealthyRetryPolicy", {}), "http")
    effective: dict[str, Any] = {
        "defaultHealthyRetryPolicy": asdict(retry),
        "disableSubscriptionOverrides": http.get("disableSubscriptionOverrides", False),
        "defaultRequestPolicy": {
            "headerContentType": DEFAULT_CONTENT_TYPE,
            **(http.get("defaultRequestPolicy") or {}),
        },
    }
    if "defaultThrottlePolicy" in http:
        effective["defaultThrottlePolicy"] = http["defaultThrottlePolicy"]
    return {**document, "http": effective}


def subscription_policy(text: str) -> dict[str, Any]:
    """A subscription's ``DeliveryPolicy``, checked (``Invalid`` as ``topic_policy``)."""
    document = _document(text)
    _check_parts(document, "", topic=False)
    return document


def _check_parts(given: Mapping[str, Any], where: str, topic: bool) -> None:
    """Check each part of a policy: a subscription's ``healthyRetryPolicy``,
    ``throttlePolicy`` and ``requestPolicy``, or a topic's ``default...`` ones and its
    ``disableSubscriptionOverrides``."""
    for name, value in given.items():
        if topic and name == "disableSubscriptionOverrides":
            if not isinstance(value, bool):
                raise _refuse(f"{where}{name} must be true or false")
            continue
        part = name.removeprefix("default") if topic and name.startswith("default") else ""
        check = _PARTS.get(part[:1].lower() + part[1:] if topic else name)
        if check is None:
            raise _refuse(f"{where}{name} is not a delivery policy field")
        check(value, f"{where}{name}")


@dataclass(frozen=True, slots=True)
class DeliveryRules:
    """What one subscription's deliveries follow: its retries, at most how many
    deliveries a second (None: no bound), and the ``Content-Type`` they carry."""

    retry: RetryPolicy
    max_per_second: int | None
    content_type: str


def delivery_rules(topic: Mapping[str, Any], subscription: Mapping[str, Any]) -> DeliveryRules:
    """The rules of a subscription with policy ``subscription`` (``{}``: none) on a topic
    with policy ``topic``: the subscription's where it says something and the topic allows
    overrides, the topic's defaults then, AWS's where neither does."""
    http = topic.get("http") or {}
    own = {} if http.get("disableSubscriptionOverrides") else subscription
    retry = own.get("healthyRetryPolicy", http.get("defaultHealthyRetryPolicy", {}))
    throttle = own.get("throttlePolicy", http.get("defaultThrottlePolicy", {}))
    request = own.get("requestPolicy", http.get("defaultRequestPolicy", {}))
    return DeliveryRules(
        RetryPolicy.read(retry, "healthyRetryPolicy"),
        throttle.get("maxReceivesPerSecond"),
        request.get("headerContentType", DEFAULT_CONTENT_TYPE),
    )


def effective_subscription_policy(
    topic: Mapping[str, Any], subscription: Mapping[str, Any]
) -> dict[str, Any]:
    """A subscription's ``EffectiveDeliveryPolicy``, as SNS shows it."""
    rules = delivery_rules(topic, subscription)
    said = rules.content_type != DEFAULT_CONTENT_TYPE
    return shown_policy(
        {
            "healthyRetryPolicy": asdict(rules.retry),
            "throttlePolicy": None
            if rules.max_per_second is None
            else {"maxReceivesPerSecond": rules.max_per_second},
            "requestPolicy": {"headerContentType": rules.content_type} if said else None,
        }
    )


def shown_policy(subscription: Mapping[str, Any]) -> dict[str, Any]:
    """A subscription's ``DeliveryPolicy`` as SNS shows it: every part, null where unset."""
    return {
        "healthyRetryPolicy": subscription.get("healthyRetryPolicy"),
        "sicklyRetryPolicy": None,
        "throttlePolicy": subscription.get("throttlePolicy"),
        "requestPolicy": subscription.get("requestPolicy"),
        "guaranteed": False,
    }
