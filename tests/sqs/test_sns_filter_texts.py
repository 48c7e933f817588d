"""SNS's refusals of malformed filter policies, word for word and column for column as
AWS answered them (recorded in LocalStack's snapshots of real AWS): the reason, and where
SNS's parser stood in the policy written without spaces."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.servers import require_module
from tests.sqs.conftest import queue_arn
from tests.sqs.test_sns import new_topic

require_module("boto3", "test")

from botocore.exceptions import ClientError  # noqa: E402

# (the policy as SNS writes it back, the reason, the column; None: SNS names no place)
RECORDED = [
    ('{"key":[["value"]]}', "Match value must be String, number, true, false, or null", 10),
    ('{"key":[{"wrong-operator":true}]}', "Unrecognized match type wrong-operator", 31),
    (
        '{"key":[{"suffix":"value","prefix":"value2"}]}',
        "Only one key allowed in match expression",
        37,
    ),
    ('{"key":[]}', "Empty arrays are not allowed", 10),
    ('{"key":[{"suffix":100}]}', "suffix match pattern must be a string", 22),
    ('{"key":[{"suffix":null}]}', "suffix match pattern must be a string", 23),
    ('{"key":{"suffix":"value"}}', '"suffix" must be an object or an array', 19),
    ('{"key":[{"suffix":[]}]}', "suffix match pattern must be a string", 20),
    ('{"key":[{"suffix":["test","test2"]}]}', "suffix match pattern must be a string", 20),
    ('{"key":{"suffix":"value","prefix":"value"}}', '"suffix" must be an object or an array', 19),
    ('{"key":{"not-an-operator":"value"}}', '"not-an-operator" must be an object or an array', 28),
    ('{"key":[{"cidr":["bad-filter"]}]}', "prefix match pattern must be a string", 18),
    ('{"key":[{"cidr":"bad-filter"}]}', "Malformed CIDR, one '/' required", None),
    ('{"key":[{"cidr":"bad-filter/64"}]}', "Nonstandard IP address: bad-filter", None),
    ('{"key":[{"cidr":"bad-/64filter"}]}', "Malformed CIDR, mask bits must be an integer", None),
    ('{"key":[{"cidr":"xx.11.xx/8"}]}', "Nonstandard IP address: xx.11.xx", None),
    (
        '{"key":[{"cidr":"xxxx:db8:1234:1a00::/64"}]}',
        "Nonstandard IP address: xxxx:db8:1234:1a00::",
        None,
    ),
    ('{"key":[{"numeric":[]}]}', "Invalid member in numeric match: ]", 22),
    ('{"key":[{"numeric":["operator"]}]}', "Unrecognized numeric range operator: operator", 32),
    ('{"key":[{"numeric":[1,"<="]}]}', "Invalid member in numeric match: 1", 22),
    ('{"key":[{"numeric":["=","000"]}]}', "Value of equals must be numeric", 26),
    ('{"key":[{"numeric":[">="]}]}', "Value of >= must be numeric", 26),
    ('{"key":[{"numeric":["<",100,">",10]}]}', "Too many elements in numeric expression", 30),
    ('{"key":[{"numeric":[">=",1,">",2]}]}', "Bad numeric range operator: >", 31),
    ('{"key":[{"numeric":[">",3,"<",1]}]}', "Bottom must be less than top", 33),
    ('{"key":[{"numeric":[">",20,"<="]}]}', "Value of <= must be numeric", 33),
    ('{"key":[{"numeric":[">",20,30]}]}', "Bad value in numeric range: 30", 30),
    ('{"key":[{"numeric":[">",20,"test"]}]}', "Bad numeric range operator: test", 34),
    ('{"key":[{"numeric":[">","20","<","30"]}]}', "Value of > must be numeric", 26),
    ('{"key":[{"numeric":[">",20,"<","30"]}]}', "Value of < must be numeric", 33),
    (
        '{"key":[{"numeric":[">",20,"<",30,"<",50]}]}',
        "Too many terms in numeric range expression",
        36,
    ),
    ('{"key":[{"exists":null}]}', "exists match pattern must be either true or false.", 23),
    ('{"key":[{"exists":"no"}]}', "exists match pattern must be either true or false.", 20),
    (
        '{"key":[{"anything-but":{"wrong-operator":null}}]}',
        "Unsupported anything-but pattern: wrong-operator",
        47,
    ),
    ('{"key":[{"anything-but":{"exists":false}}]}', "Unsupported anything-but pattern: exists", 40),
    ('{"key":[{"anything-but":{"prefix":false}}]}', "prefix match pattern must be a string", 40),
]


@pytest.mark.parametrize(("policy", "reason", "column"), RECORDED)
def test_a_malformed_policy_is_refused_as_aws_refuses_it(
    sns: Any, sqs: Any, new_queue: Any, policy: str, reason: str, column: int | None
) -> None:
    topic = new_topic(sns)
    spaced = json.dumps(json.loads(policy))  # sent with spaces, as SDK users write it
    with pytest.raises(ClientError) as refused:
        sns.subscribe(
            TopicArn=topic,
            Protocol="sqs",
            Endpoint=queue_arn(sqs, new_queue()),
            Attributes={"FilterPolicy": spaced},
        )
    where = (
        "" if column is None else f'\n at [Source: (String)"{policy}"; line: 1, column: {column}]'
    )
    error = refused.value.response["Error"]
    assert error["Code"] == "InvalidParameter"
    assert (
        error["Message"] == f"Invalid parameter: Attributes Reason: FilterPolicy: {reason}{where}"
    )
    assert sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"] == []
