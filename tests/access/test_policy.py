"""The policy evaluator, table-driven: what AWS decides for SQS and SNS requests under an
identity policy and a resource's own, and what it refuses to read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dynamiq.access.policy import Decision, PolicyError, Request, evaluate, parse

A, B = "111111111111", "222222222222"
QUEUE = f"arn:aws:sqs:us-east-1:{A}:orders"
TOPIC = f"arn:aws:sns:us-east-1:{A}:events"
ALLOW, EXPLICIT, IMPLICIT = Decision.ALLOW, Decision.EXPLICIT_DENY, Decision.IMPLICIT_DENY


def _policy(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def _allow(
    principal: Any = "*", action: Any = "sqs:*", resource: Any = QUEUE, **more: Any
) -> dict[str, Any]:
    return {
        "Effect": "Allow",
        "Principal": principal,
        "Action": action,
        "Resource": resource,
        **more,
    }


def _deny(**more: Any) -> dict[str, Any]:
    return {**_allow(**more), "Effect": "Deny"}


def _identity(action: Any = "sqs:*", resource: Any = "*", effect: str = "Allow") -> str:
    return _policy({"Effect": effect, "Action": action, "Resource": resource})


def _ask(
    action: str = "sqs:SendMessage",
    account: str = A,
    resource: str = QUEUE,
    *,
    identity: str | None = None,
    policy: str | None = None,
    context: dict[str, str] | None = None,
    service: str | None = None,
) -> Decision:
    request = Request(
        action,
        resource,
        None if service else account,
        None if service else f"arn:aws:iam::{account}:user/dq0123",
        service,
        context or {},
    )
    identities = [] if identity is None else [parse(identity, resource_policy=False)]
    own = None if policy is None else parse(policy)
    same = service is None and account == resource.split(":")[4]
    return evaluate(request, identities, own, same_account=same)


CASES: list[tuple[str, dict[str, Any], Decision]] = [
    ("nothing allows it", {}, IMPLICIT),
    ("the identity allows it", {"identity": _identity()}, ALLOW),
    ("the resource allows it, same account", {"policy": _policy(_allow())}, ALLOW),
    (
        "an identity deny beats the resource's allow",
        {"identity": _identity(effect="Deny"), "policy": _policy(_allow())},
        EXPLICIT,
    ),
    (
        "a resource deny beats the identity's allow",
        {"identity": _identity(), "policy": _policy(_deny())},
        EXPLICIT,
    ),
    ("an action wildcard: sqs:Send*", {"identity": _identity("sqs:Send*")}, ALLOW),
    ("an action wildcard misses", {"identity": _identity("sqs:Receive*")}, IMPLICIT),
    ("actions are named in any case", {"identity": _identity("SQS:sendmessage")}, ALLOW),
    ("a ? wildcard", {"identity": _identity("sqs:SendMessag?")}, ALLOW),
    (
        "NotAction",
        {"identity": _policy({"Effect": "Allow", "NotAction": "sqs:Delete*", "Resource": "*"})},
        ALLOW,
    ),
    (
        "NotAction excludes",
        {
            "action": "sqs:DeleteQueue",
            "identity": _policy({"Effect": "Allow", "NotAction": "sqs:Delete*", "Resource": "*"}),
        },
        IMPLICIT,
    ),
    ("a resource wildcard", {"identity": _identity(resource=f"arn:aws:sqs:*:{A}:ord*")}, ALLOW),
    (
        "a resource wildcard misses",
        {"identity": _identity(resource=f"arn:aws:sqs:*:{A}:pay*")},
        IMPLICIT,
    ),
    (
        "NotResource",
        {
            "identity": _policy(
                {"Effect": "Allow", "Action": "sqs:*", "NotResource": f"arn:aws:sqs:*:{A}:pay*"}
            )
        },
        ALLOW,
    ),
    (
        "across accounts the identity alone is not enough",
        {"account": B, "identity": _identity()},
        IMPLICIT,
    ),
    (
        "across accounts the resource alone is not enough",
        {"account": B, "policy": _policy(_allow())},
        IMPLICIT,
    ),
    (
        "across accounts both allow it",
        {"account": B, "identity": _identity(), "policy": _policy(_allow({"AWS": B}))},
        ALLOW,
    ),
    (
        "a principal by its root ARN",
        {
            "account": B,
            "identity": _identity(),
            "policy": _policy(_allow({"AWS": f"arn:aws:iam::{B}:root"})),
        },
        ALLOW,
    ),
    (
        "a principal of another account",
        {"account": B, "identity": _identity(), "policy": _policy(_allow({"AWS": A}))},
        IMPLICIT,
    ),
    (
        "NotPrincipal",
        {
            "account": B,
            "identity": _identity(),
            "policy": _policy(
                {
                    "Effect": "Deny",
                    "NotPrincipal": {"AWS": A},
                    "Action": "sqs:*",
                    "Resource": QUEUE,
                },
                _allow(),
            ),
        },
        EXPLICIT,
    ),
    (
        "a service principal",
        {
            "service": "sns.amazonaws.com",
            "policy": _policy(_allow({"Service": "sns.amazonaws.com"})),
        },
        ALLOW,
    ),
    (
        "a service principal is not anyone's account",
        {"service": "sns.amazonaws.com", "policy": _policy(_allow({"AWS": A}))},
        IMPLICIT,
    ),
]


def _condition(operator: str, key: str, value: Any) -> str:
    return _policy(_allow(Condition={operator: {key: value}}))


TOPIC_ARN = f"arn:aws:sns:us-east-1:{B}:events"
CONDITIONS: list[tuple[str, str, Any, dict[str, str], Decision]] = [
    ("StringEquals", "aws:SourceAccount", B, {"aws:sourceaccount": B}, ALLOW),
    ("StringEquals", "aws:SourceAccount", B, {"aws:sourceaccount": A}, IMPLICIT),
    ("StringNotEquals", "aws:SourceAccount", B, {"aws:sourceaccount": A}, ALLOW),
    ("StringEqualsIgnoreCase", "aws:UserAgent", "BOTO3", {"aws:useragent": "boto3"}, ALLOW),
    ("StringLike", "aws:UserAgent", "Boto3/*", {"aws:useragent": "Boto3/1.40"}, ALLOW),
    ("StringNotLike", "aws:UserAgent", "curl*", {"aws:useragent": "Boto3/1.40"}, ALLOW),
    ("ArnEquals", "aws:SourceArn", TOPIC_ARN, {"aws:sourcearn": TOPIC_ARN}, ALLOW),
    ("ArnLike", "aws:SourceArn", f"arn:aws:sns:*:{B}:*", {"aws:sourcearn": TOPIC_ARN}, ALLOW),
    ("ArnLike", "aws:SourceArn", f"arn:aws:sns:*:{A}:*", {"aws:sourcearn": TOPIC_ARN}, IMPLICIT),
    ("ArnNotLike", "aws:SourceArn", f"arn:aws:sns:*:{A}:*", {"aws:sourcearn": TOPIC_ARN}, ALLOW),
    ("IpAddress", "aws:SourceIp", "10.0.0.0/8", {"aws:sourceip": "10.1.2.3"}, ALLOW),
    (
        "IpAddress",
        "aws:SourceIp",
        ["192.168.0.0/16", "10.0.0.0/8"],
        {"aws:sourceip": "10.1.2.3"},
        ALLOW,
    ),
    ("IpAddress", "aws:SourceIp", "10.0.0.0/8", {"aws:sourceip": "127.0.0.1"}, IMPLICIT),
    ("NotIpAddress", "aws:SourceIp", "10.0.0.0/8", {"aws:sourceip": "127.0.0.1"}, ALLOW),
    ("Bool", "aws:SecureTransport", "true", {"aws:securetransport": "false"}, IMPLICIT),
    ("Bool", "aws:SecureTransport", True, {"aws:securetransport": "true"}, ALLOW),
    (
        "DateLessThan",
        "aws:CurrentTime",
        "2030-01-01T00:00:00Z",
        {"aws:currenttime": "2026-12-07T12:00:00Z"},
        ALLOW,
    ),
    (
        "DateGreaterThan",
        "aws:CurrentTime",
        "2030-01-01T00:00:00Z",
        {"aws:currenttime": "2026-12-07T12:00:00Z"},
        IMPLICIT,
    ),
    ("DateLessThanEquals", "aws:EpochTime", "1900000000", {"aws:epochtime": "1800000000"}, ALLOW),
    ("NumericLessThan", "aws:EpochTime", "1900000000", {"aws:epochtime": "1800000000"}, ALLOW),
    ("StringEqualsIfExists", "aws:SourceAccount", B, {}, ALLOW),
    ("StringEquals", "aws:SourceAccount", B, {}, IMPLICIT),
    ("Null", "aws:SourceArn", "true", {}, ALLOW),
    ("Null", "aws:SourceArn", "false", {}, IMPLICIT),
    ("ForAnyValue:StringEquals", "aws:SourceAccount", [A, B], {"aws:sourceaccount": B}, ALLOW),
]


@pytest.mark.parametrize(("why", "asked", "decided"), CASES, ids=[c[0] for c in CASES])
def test_a_request_is_decided_as_aws_decides_it(
    why: str, asked: dict[str, Any], decided: Decision
) -> None:
    assert _ask(**asked) is decided, why


@pytest.mark.parametrize(
    ("operator", "key", "value", "context", "decided"),
    CONDITIONS,
    ids=[f"{c[0]}-{c[4].value}-{i}" for i, c in enumerate(CONDITIONS)],
)
def test_each_condition_operator(
    operator: str, key: str, value: Any, context: dict[str, str], decided: Decision
) -> None:
    assert _ask(policy=_condition(operator, key, value), context=context) is decided


def test_a_topic_may_deliver_into_another_account_s_queue_its_policy_names() -> None:
    policy = _condition("ArnEquals", "aws:SourceArn", TOPIC_ARN)
    delivery = {"aws:sourcearn": TOPIC_ARN, "aws:sourceaccount": B}
    stranger = {"aws:sourcearn": f"arn:aws:sns:us-east-1:{B}:other", "aws:sourceaccount": B}
    sns = "sns.amazonaws.com"
    named = _policy(_allow({"Service": sns}, Condition={"ArnEquals": {"aws:SourceArn": TOPIC_ARN}}))
    assert _ask(policy=named, context=delivery, service=sns) is ALLOW
    assert _ask(policy=named, context=stranger, service=sns) is IMPLICIT
    assert _ask(policy=policy, context=delivery, service=sns) is ALLOW  # Principal "*"


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ("not json", "not a JSON document"),
        (_policy(), "needs a Statement"),
        (_policy({"Effect": "Maybe", "Action": "sqs:*", "Principal": "*"}), "Effect"),
        (_policy({"Effect": "Allow", "Principal": "*", "Resource": QUEUE}), "needs a Action"),
        (_policy({"Effect": "Allow", "Action": "sqs:*", "Resource": QUEUE}), "Principal"),
        (_condition("StringEquals", "aws:NoSuchKey", "x"), "Condition key 'aws:NoSuchKey'"),
        (_condition("StringRoughly", "aws:SourceAccount", "x"), "operator 'StringRoughly'"),
        (_condition("IpAddress", "aws:SourceIp", "ten"), "is not valid"),
        (_condition("DateLessThan", "aws:CurrentTime", "soon"), "is not valid"),
        (_condition("Bool", "aws:SecureTransport", "maybe"), "not true or false"),
        (_policy(_allow(principal={"Federated": "x"})), "Principal 'Federated'"),
        (_policy(_allow(principal={"AWS": "someone"})), "not an account"),
        (json.dumps({"Version": "2099-01-01", "Statement": [_allow()]}), "Version"),
        (_policy({**_allow(), "NotAction": "sqs:*"}), "not both"),
    ],
)
def test_a_policy_this_evaluator_would_misread_is_refused(document: str, said: str) -> None:
    with pytest.raises(PolicyError, match=None) as caught:
        parse(document)
    assert said in str(caught.value)


def test_an_identity_policy_names_no_principal() -> None:
    with pytest.raises(PolicyError):
        parse(_policy(_allow()), resource_policy=False)
