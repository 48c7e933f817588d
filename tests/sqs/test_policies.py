"""Policies evaluated end to end, through boto3 signing with the node's credentials: the
applications as accounts, a queue's and a topic's own policies across them, AddPermission
and RemovePermission, a topic of one application delivering into another's queue, and a
dead-letter queue's RedriveAllowPolicy."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NodeProcess
from tests.servers import require_module
from tests.sqs.signed import client, credential, keyed_node

require_module("boto3", "test")

from botocore.exceptions import ClientError  # noqa: E402


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    started = keyed_node(Path(tmp_path_factory.mktemp("policies")))
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def keys(node: NodeProcess) -> dict[str, dict[str, Any]]:
    return {
        "alpha": credential(node.url, "alpha", "manage"),
        "beta": credential(node.url, "beta", "manage"),
        "beta-producer": credential(node.url, "beta", "produce"),
    }


@contextlib.contextmanager
def _clients(node: NodeProcess, made: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
    sqs, sns = client(node.url, made), client(node.url, made, "sns")
    with contextlib.closing(sqs), contextlib.closing(sns):
        yield sqs, sns


def _error(call: Any, **params: Any) -> dict[str, Any]:
    with pytest.raises(ClientError) as caught:
        call(**params)
    error = caught.value.response["Error"]
    return {**error, "status": caught.value.response["ResponseMetadata"]["HTTPStatusCode"]}


def _name() -> str:
    return f"p-{uuid.uuid4().hex[:8]}"


def _arn(sqs: Any, url: str) -> str:
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])


def test_applications_are_accounts_whose_queues_never_meet(
    node: NodeProcess, keys: dict[str, dict[str, Any]]
) -> None:
    name = _name()
    with _clients(node, keys["alpha"]) as (a, _), _clients(node, keys["beta"]) as (b, _):
        a_url = a.create_queue(QueueName=name)["QueueUrl"]
        b_url = b.create_queue(QueueName=name)["QueueUrl"]
        assert a_url != b_url and a_url.endswith(f"/{keys['alpha']['account']}/{name}")
        a.send_message(QueueUrl=a_url, MessageBody="alpha's")
        assert "Messages" not in b.receive_message(QueueUrl=b_url)
        assert b.get_queue_url(QueueName=name)["QueueUrl"] == b_url
        assert a_url not in b.list_queues(QueueNamePrefix=name).get("QueueUrls", [])


def test_another_application_reads_a_queue_only_once_its_policy_allows_it(
    node: NodeProcess, keys: dict[str, dict[str, Any]]
) -> None:
    alpha, beta = keys["alpha"], keys["beta"]
    with _clients(node, alpha) as (a, _), _clients(node, beta) as (b, _):
        url = a.create_queue(QueueName=_name())["QueueUrl"]
        arn = _arn(a, url)
        a.send_message(QueueUrl=url, MessageBody="shared")
        error = _error(b.receive_message, QueueUrl=url)
        assert (error["Code"], error["status"]) == ("AccessDenied", 403)
        assert error["Message"] == (
            f"User: arn:aws:iam::{beta['account']}:user/{beta['key_id']} is not authorized to "
            f"perform: sqs:ReceiveMessage on resource: {arn} because no resource-based "
            "policy allows the sqs:ReceiveMessage action"
        )
        allow = {
            "Sid": "beta-reads",
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{beta['account']}:root"},
            "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage"],
            "Resource": arn,
        }
        policy = {"Version": "2012-10-17", "Statement": [allow]}
        a.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(policy)})
        got = b.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"]
        assert [m["Body"] for m in got] == ["shared"]
        b.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
        # What the policy does not name stays refused; so do the owner's own actions.
        assert _error(b.send_message, QueueUrl=url, MessageBody="x")["Code"] == "AccessDenied"
        wide = {**allow, "Action": "sqs:*"}
        a.set_queue_attributes(
            QueueUrl=url, Attributes={"Policy": json.dumps({"Statement": [wide]})}
        )
        b.purge_queue(QueueUrl=url)  # SQS lets a policy grant it across accounts
        refused = _error(b.set_queue_attributes, QueueUrl=url, Attributes={"DelaySeconds": "1"})
        assert refused["Code"] == "AccessDenied"
        # An explicit deny wins over the allow.
        deny = {**allow, "Sid": "but-not-this", "Effect": "Deny", "Action": "sqs:ReceiveMessage"}
        both = {"Statement": [wide, deny]}
        a.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(both)})
        error = _error(b.receive_message, QueueUrl=url)
        assert error["Message"].endswith("with an explicit deny in a resource-based policy")


def test_add_permission_grants_and_remove_permission_takes_it_away(
    node: NodeProcess, keys: dict[str, dict[str, Any]]
) -> None:
    beta = keys["beta-producer"]
    with _clients(node, keys["alpha"]) as (a, _), _clients(node, beta) as (b, _):
        url = a.create_queue(QueueName=_name())["QueueUrl"]
        assert _error(b.send_message, QueueUrl=url, MessageBody="1")["Code"] == "AccessDenied"
        a.add_permission(
            QueueUrl=url,
            Label="beta-sends",
            AWSAccountIds=[beta["account"]],
            Actions=["SendMessage"],
        )
        b.send_message(QueueUrl=url, MessageBody="2")
        b.send_message_batch(
            QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "3"}]
        )  # by SendMessage
        a.remove_permission(QueueUrl=url, Label="beta-sends")
        assert _error(b.send_message, QueueUrl=url, MessageBody="4")["Code"] == "AccessDenied"
        attributes = a.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
        )
        assert attributes["Attributes"]["ApproximateNumberOfMessages"] == "2"


def test_a_role_is_the_key_s_identity_policy(
    node: NodeProcess, keys: dict[str, dict[str, Any]]
) -> None:
    beta = keys["beta-producer"]
    with _clients(node, keys["beta"]) as (manager, _), _clients(node, beta) as (producer, sns):
        url = manager.create_queue(QueueName=_name())["QueueUrl"]
        producer.send_message(QueueUrl=url, MessageBody="ok")
        error = _error(producer.receive_message, QueueUrl=url)
        assert error["Message"].endswith(
            "because no identity-based policy allows the sqs:ReceiveMessage action"
        )
        assert _error(producer.create_queue, QueueName=_name())["Code"] == "AccessDenied"
        error = _error(sns.create_topic, Name=_name())
        assert (error["Code"], error["status"]) == ("AuthorizationError", 403)


def test_a_topic_delivers_into_another_application_s_queue_only_where_its_policy_says(
    node: NodeProcess, keys: dict[str, dict[str, Any]]
) -> None:
    with _clients(node, keys["alpha"]) as (_, a_sns), _clients(node, keys["beta"]) as (b, _):
        topic = a_sns.create_topic(Name=_name())["TopicArn"]
        other = a_sns.create_topic(Name=_name())["TopicArn"]
        url = b.create_queue(QueueName=_name())["QueueUrl"]
        arn = _arn(b, url)
        for t in (topic, other):
            a_sns.subscribe(TopicArn=t, Protocol="sqs", Endpoint=arn)
        a_sns.publish(TopicArn=topic, Message="before")
        assert "Messages" not in b.receive_message(QueueUrl=url)  # no policy: nothing
        statement = {
            "Effect": "Allow",
            "Principal": {"Service": "sns.amazonaws.com"},
            "Action": "sqs:SendMessage",
            "Resource": arn,
            "Condition": {"ArnEquals": {"aws:SourceArn": topic}},
        }
        b.set_queue_attributes(
            QueueUrl=url, Attributes={"Policy": json.dumps({"Statement": [statement]})}
        )
        a_sns.publish(TopicArn=topic, Message="named")
        a_sns.publish(TopicArn=other, Message="not named")
        got = b.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)["Messages"]
        assert [json.loads(m["Body"])["Message"] for m in got] == ["named"]
        assert json.loads(got[0]["Body"])["TopicArn"] == topic  # in its application's account


def test_a_topic_s_policy_lets_another_application_publish(
    node: NodeProcess, keys: dict[str, dict[str, Any]]
) -> None:
    beta = keys["beta-producer"]
    with _clients(node, keys["alpha"]) as (_, a_sns), _clients(node, beta) as (_, b_sns):
        topic = a_sns.create_topic(Name=_name())["TopicArn"]
        error = _error(b_sns.publish, TopicArn=topic, Message="x")
        assert (error["Code"], error["status"]) == ("AuthorizationError", 403)
        assert error["Message"] == (
            f"User: arn:aws:iam::{beta['account']}:user/{beta['key_id']} is not authorized "
            f"to perform: SNS:Publish on resource: {topic}"
        )
        a_sns.add_permission(
            TopicArn=topic, Label="beta", AWSAccountId=[beta["account"]], ActionName=["Publish"]
        )
        assert b_sns.publish(TopicArn=topic, Message="y")["MessageId"]
        a_sns.remove_permission(TopicArn=topic, Label="beta")
        assert _error(b_sns.publish, TopicArn=topic, Message="z")["Code"] == "AuthorizationError"


def test_a_dead_letter_queue_s_redrive_allow_policy_is_enforced(
    node: NodeProcess, keys: dict[str, dict[str, Any]]
) -> None:
    with _clients(node, keys["alpha"]) as (a, _), _clients(node, keys["beta"]) as (b, _):
        dlq = a.create_queue(QueueName=_name())["QueueUrl"]
        dlq_arn = _arn(a, dlq)
        allowed = a.create_queue(QueueName=_name())["QueueUrl"]
        stranger = a.create_queue(QueueName=_name())["QueueUrl"]
        only = {"redrivePermission": "byQueue", "sourceQueueArns": [_arn(a, allowed)]}
        a.set_queue_attributes(QueueUrl=dlq, Attributes={"RedriveAllowPolicy": json.dumps(only)})
        redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 3})
        a.set_queue_attributes(QueueUrl=allowed, Attributes={"RedrivePolicy": redrive})
        error = _error(
            a.set_queue_attributes, QueueUrl=stranger, Attributes={"RedrivePolicy": redrive}
        )
        assert error["Code"] == "InvalidParameterValue"
        assert "does not allow this queue as a source" in error["Message"]
        a.set_queue_attributes(
            QueueUrl=dlq,
            Attributes={"RedriveAllowPolicy": json.dumps({"redrivePermission": "denyAll"})},
        )
        error = _error(a.create_queue, QueueName=_name(), Attributes={"RedrivePolicy": redrive})
        assert error["Code"] == "InvalidParameterValue"
        # Another application's queue is never a dead-letter queue here, as on AWS.
        a.set_queue_attributes(
            QueueUrl=dlq,
            Attributes={"RedriveAllowPolicy": json.dumps({"redrivePermission": "allowAll"})},
        )
        error = _error(b.create_queue, QueueName=_name(), Attributes={"RedrivePolicy": redrive})
        assert "owner is not the same" in error["Message"]


def test_v2_sets_the_same_policies_and_refuses_what_the_evaluator_would_misread(
    node: NodeProcess, keys: dict[str, dict[str, Any]]
) -> None:
    from tests.conftest import ADMIN_KEY
    from tests.sqs.signed import fetch

    beta = keys["beta-producer"]
    name = _name()
    headers = {"Authorization": f"Bearer {ADMIN_KEY}", "Content-Type": "application/json"}
    queue = f"{node.url}/v2/queues/alpha:{name}"
    odd = {
        "Effect": "Allow",
        "Principal": "*",
        "Action": "sqs:*",
        "Condition": {"StringEquals": {"aws:NoSuchKey": "x"}},
    }
    body = json.dumps({"sqs_attributes": {"Policy": json.dumps({"Statement": [odd]})}})
    status, _, answer = fetch(queue, "PUT", body.encode(), headers)
    assert status == 422 and b"aws:NoSuchKey" in answer  # v2's refusal of a setting
    allow = {
        "Effect": "Allow",
        "Principal": {"AWS": beta["account"]},
        "Action": "sqs:SendMessage",
        "Resource": "*",
    }
    body = json.dumps({"sqs_attributes": {"Policy": json.dumps({"Statement": [allow]})}})
    assert fetch(queue, "PUT", body.encode(), headers)[0] == 201
    with _clients(node, beta) as (b, _):
        url = f"{node.url}/{keys['alpha']['account']}/{name}"
        assert b.send_message(QueueUrl=url, MessageBody="through v2's policy")["MessageId"]


def test_add_permission_on_the_query_protocol_is_sqs_s_not_sns_s(
    node: NodeProcess, keys: dict[str, dict[str, Any]]
) -> None:
    """Both services have AddPermission: a form signed for SQS is SQS's."""
    from tests.servers import require_path
    from tests.sqs.signed import QUERY_MODELS

    require_path(QUERY_MODELS / "sqs", "setup.sh fetches botocore 1.31's SQS model")
    beta = keys["beta-producer"]
    with contextlib.closing(client(node.url, keys["alpha"], query=True)) as query:
        url = query.create_queue(QueueName=_name())["QueueUrl"]
        query.add_permission(
            QueueUrl=url, Label="q", AWSAccountIds=[beta["account"]], Actions=["SendMessage"]
        )
        with _clients(node, beta) as (b, _):
            assert b.send_message(QueueUrl=url, MessageBody="in")["MessageId"]
        query.remove_permission(QueueUrl=url, Label="q")
