"""SNS filter policies through boto3: on message bodies and attributes, every operator
family, and refusals in SNS's words that change nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.servers import require_module
from tests.sqs.conftest import queue_arn
from tests.sqs.test_sns import drain, new_topic

require_module("boto3", "test")

from botocore.exceptions import ClientError  # noqa: E402


def subscribe(sns: Any, sqs: Any, topic: str, url: str, policy: Any, scope: str) -> str:
    attributes = {
        "FilterPolicy": json.dumps(policy),
        "FilterPolicyScope": scope,
        "RawMessageDelivery": "true",
    }
    answer = sns.subscribe(
        TopicArn=topic, Protocol="sqs", Endpoint=queue_arn(sqs, url), Attributes=attributes
    )
    return str(answer["SubscriptionArn"])


def bodies(sqs: Any, url: str, want: int) -> list[str]:
    return sorted(m["Body"] for m in drain(sqs, url, want))


def test_body_policies_route_json_messages(sns: Any, sqs: Any, new_queue: Any) -> None:
    topic = new_topic(sns)
    created, large = new_queue("-created"), new_queue("-large")
    s3 = {
        "Records": {
            "s3": {"object": {"key": [{"prefix": "auto-"}]}},
            "eventName": [{"prefix": "ObjectCreated:"}],
        }
    }
    arn = subscribe(sns, sqs, topic, created, s3, "MessageBody")
    either = {"$or": [{"order.total": [{"numeric": [">=", 100]}]}, {"order": {"vip": [True]}}]}
    subscribe(sns, sqs, topic, large, either, "MessageBody")
    shown = sns.get_subscription_attributes(SubscriptionArn=arn)["Attributes"]
    assert shown["FilterPolicyScope"] == "MessageBody" and json.loads(shown["FilterPolicy"]) == s3

    def record(name: str, key: str) -> str:
        return json.dumps({"Records": [{"eventName": name, "s3": {"object": {"key": key}}}]})

    messages = [
        record("ObjectCreated:Put", "auto-1.xml"),
        record("ObjectRemoved:Delete", "auto-2.xml"),
        record("ObjectCreated:Put", "home-3.xml"),
        json.dumps({"order": {"total": 150}}),
        json.dumps({"order": {"total": 50, "vip": True}}),
        json.dumps({"order": {"total": 50, "vip": "true"}}),  # a text is no boolean
        "not json at all",
    ]
    for body in messages:
        sns.publish(TopicArn=topic, Message=body)
    assert bodies(sqs, created, 1) == [messages[0]]
    assert bodies(sqs, large, 2) == sorted(messages[3:5])


def test_attribute_policies_with_arrays_and_every_operator_family(
    sns: Any, sqs: Any, new_queue: Any
) -> None:
    topic = new_topic(sns)
    urls = {name: new_queue(f"-{name}") for name in ("sport", "host", "quiet")}
    subscribe(sns, sqs, topic, urls["sport"], {"sport": ["rugby"]}, "MessageAttributes")
    hosts = {
        "host": [{"suffix": ".example.com"}, {"equals-ignore-case": "LOCALHOST"}],
        "ip": [{"cidr": "10.0.0.0/8"}],
    }
    subscribe(sns, sqs, topic, urls["host"], hosts, "MessageAttributes")
    quiet = {"level": [{"anything-but": ["debug", "trace"]}, {"exists": False}]}
    subscribe(sns, sqs, topic, urls["quiet"], quiet, "MessageAttributes")

    def text(value: str, kind: str = "String") -> dict[str, str]:
        return {"DataType": kind, "StringValue": value}

    sent = {
        "a": {"sport": text('["golf", "rugby"]', "String.Array"), "level": text("debug")},
        "b": {"host": text("api.example.com"), "ip": text("10.1.2.3")},
        "c": {"host": text("localhost"), "ip": text("192.168.0.1"), "level": text("info")},
        "d": {"host": text("Localhost"), "ip": text("10.9.9.9"), "level": text("trace")},
    }
    for body, attributes in sent.items():
        sns.publish(TopicArn=topic, Message=body, MessageAttributes=attributes)
    assert bodies(sqs, urls["sport"], 1) == ["a"]
    assert bodies(sqs, urls["host"], 2) == ["b", "d"]
    assert bodies(sqs, urls["quiet"], 2) == ["b", "c"]


def _refusal(caught: pytest.ExceptionInfo[ClientError]) -> tuple[str, str]:
    error = caught.value.response["Error"]
    return error["Code"], error["Message"]


def test_a_refused_policy_is_answered_in_sns_words_and_changes_nothing(
    sns: Any, sqs: Any, new_queue: Any
) -> None:
    topic = new_topic(sns)
    url = new_queue()
    six = {f"k{i}": ["v"] for i in range(6)}
    with pytest.raises(ClientError) as caught:
        subscribe(sns, sqs, topic, url, six, "MessageAttributes")
    assert _refusal(caught) == (
        "InvalidParameter",
        "Invalid parameter: Attributes Reason: FilterPolicy: "
        "Filter policy can not have more than 5 keys",
    )
    assert sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"] == []

    arn = subscribe(sns, sqs, topic, url, {"a": {"b": ["c"]}}, "MessageBody")
    refusals = [
        ("FilterPolicy", json.dumps({"key": [{"numeric": [">", 10, "<", 5]}]})),
        ("FilterPolicyScope", "MessageAttributes"),  # the nested policy cannot follow
        ("FilterPolicyScope", "RandomValue"),
    ]
    said = []
    for name, value in refusals:
        with pytest.raises(ClientError) as caught:
            sns.set_subscription_attributes(
                SubscriptionArn=arn, AttributeName=name, AttributeValue=value
            )
        said.append(_refusal(caught))
    assert said == [
        (
            "InvalidParameter",
            "Invalid parameter: FilterPolicy: Bottom must be less than top\n at [Source: "
            '(String)"{"key":[{"numeric":[">",10,"<",5]}]}"; line: 1, column: 34]',
        ),
        (
            "InvalidParameter",
            "Invalid parameter: Filter policy scope MessageAttributes does not support "
            "nested filter policy",
        ),
        (
            "InvalidParameter",
            "Invalid parameter: FilterPolicyScope: Invalid value [RandomValue]. "
            "Please use either MessageBody or MessageAttributes",
        ),
    ]
    shown = sns.get_subscription_attributes(SubscriptionArn=arn)["Attributes"]
    assert (json.loads(shown["FilterPolicy"]), shown["FilterPolicyScope"]) == (
        {"a": {"b": ["c"]}},
        "MessageBody",
    )
    # an empty policy takes it away: every message passes again
    sns.set_subscription_attributes(
        SubscriptionArn=arn, AttributeName="FilterPolicy", AttributeValue=""
    )
    assert "FilterPolicy" not in sns.get_subscription_attributes(SubscriptionArn=arn)["Attributes"]
    sns.publish(TopicArn=topic, Message="anything")
    assert bodies(sqs, url, 1) == ["anything"]


# Body policies at depth, with the messages AWS was sent and what it delivered (recorded
# in LocalStack's snapshots of real AWS): each case's policy, then (message, delivered).
Delivered = list[tuple[dict[str, Any], bool]]
AT_DEPTH: dict[str, tuple[dict[str, Any], Delivered]] = {
    "dotted-keys": (
        {"object.nested.test": ["string.value"]},
        [
            ({"object": {"nested": {"test": "string.value"}}}, True),
            ({"object.nested.test": "string.value"}, True),
            ({"object.nested": {"test": "string.value"}}, True),
            ({"object": {"nested.test": "string.value"}}, True),
            ({"object": {"nested": {"test": "test-auto"}}}, False),
        ],
    ),
    "arrays": (
        {"headers": {"route-to": ["queue1"]}},
        [
            ({"headers": {"route-to": ["queue3"]}}, False),
            ({"headers": {"route-to": ["queue1"]}}, True),
            ({"headers": {"route-to": ["queue1", "queue2"]}}, True),
        ],
    ),
    "or-at-depth": (
        {
            "$or": [
                {"metricName": ["CPUUtilization", "ReadLatency"]},
                {"namespace": ["AWS/EC2", "AWS/ES"]},
            ],
            "detail": {
                "scope": ["Service"],
                "$or": [
                    {"source": ["aws.cloudwatch"]},
                    {"type": ["CloudWatch Alarm State Change"]},
                ],
            },
        },
        [
            ({"metricName": "CPUUtilization", "detail": {"scope": "aws.cloudwatch"}}, False),
            (
                {
                    "metricName": "CPUUtilization",
                    "detail": {"type": "CloudWatch Alarm State Change"},
                },
                False,
            ),
            ({"metricName": "CPUUtilization", "detail": {"scope": "Service"}}, False),
            ({"metricName": "CPUUtilization", "scope": "Service"}, False),
            (
                {
                    "metricName": "AWS/EC2",
                    "detail": {"scope": "Service", "source": "aws.cloudwatch"},
                },
                False,
            ),
            (
                {"namespace": "AWS/ES", "detail": {"scope": "Service", "source": "aws.cloudwatch"}},
                True,
            ),
            (
                {
                    "metricName": "ReadLatency",
                    "detail": {"scope": "Service", "source": "aws.cloudwatch"},
                },
                True,
            ),
            (
                {
                    "metricName": "CPUUtilization",
                    "detail": {"scope": "Service", "type": "CloudWatch Alarm State Change"},
                },
                True,
            ),
        ],
    ),
    "empty-array-and-null": (
        {"detail": {"eventVersion": [""]}},
        [({"resources": [], "detail": {"eventVersion": "", "responseElements": None}}, True)],
    ),
    "cidr-at-depth": (
        {
            "detail": {
                "$or": [
                    {"sourceIPAddress": [{"cidr": "10.0.0.0/24"}]},
                    {"sourceIPAddressV6": [{"cidr": "2001:db8:1234:1a00::/64"}]},
                ]
            }
        },
        [
            ({"id": "1", "detail": {"sourceIPAddress": "10.0.0.255"}}, True),
            ({"id": "2", "detail": {"sourceIPAddress": "10.0.0.256"}}, False),
            (
                {
                    "id": "3",
                    "detail": {"sourceIPAddressV6": "2001:0db8:1234:1a00:0000:0000:0000:0000"},
                },
                True,
            ),
            (
                {
                    "id": "4",
                    "detail": {"sourceIPAddressV6": "2001:0db8:123f:1a01:0000:0000:0000:0000"},
                },
                False,
            ),
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(AT_DEPTH))
def test_body_policies_at_depth_deliver_what_aws_delivered(
    sns: Any, sqs: Any, new_queue: Any, case: str
) -> None:
    policy, messages = AT_DEPTH[case]
    topic = new_topic(sns)
    url = new_queue()
    subscribe(sns, sqs, topic, url, policy, "MessageBody")
    for message, _ in messages:
        sns.publish(TopicArn=topic, Message=json.dumps(message))
    taken = [json.dumps(message) for message, delivered in messages if delivered]
    assert bodies(sqs, url, len(taken)) == sorted(taken)
