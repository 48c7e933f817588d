"""SNS's filter policy language, operator by operator and scope by scope, with the
refusals SNS answers (texts as AWS recorded them) and its limits."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dynamiq.core.routing.filters import FilterPolicy, FilterScope, Subject
from dynamiq.core.routing.subscriptions import Subscription, Topic
from dynamiq.errors import Invalid


def passes(spec: dict[str, Any], **message: Any) -> bool:
    """Whether a message (``attributes``, ``types``, or a ``body`` object) passes."""
    body = message.pop("body", None)
    raw = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    scope: FilterScope = "body" if raw is not None else "attributes"
    subject = Subject(message.get("attributes"), message.get("types"), raw)
    return FilterPolicy(spec, scope).matches(subject)


# -- string matching -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "value", "expected"),
    [
        ("rugby", "rugby", True),
        ("rugby", "Rugby", False),
        ("5", 5, False),  # a text never equals a number
        ({"prefix": "bas"}, "baseball", True),
        ({"prefix": "bas"}, "rugby", False),
        ({"suffix": "ball"}, "baseball", True),
        ({"suffix": "ball"}, "ballet", False),
        ({"equals-ignore-case": "RuGbY"}, "rugby", True),
        ({"equals-ignore-case": "rugby"}, "rugby league", False),
        ({"anything-but": ["rugby", "tennis"]}, "baseball", True),
        ({"anything-but": ["rugby", "tennis"]}, "tennis", False),
        ({"anything-but": "rugby"}, "rugby", False),
        ({"anything-but": {"prefix": "bas"}}, "baseball", False),
        ({"anything-but": {"prefix": "bas"}}, "rugby", True),
        ({"anything-but": {"suffix": "ball"}}, "football", False),
        ({"anything-but": {"suffix": "ball"}}, "rugby", True),
        ({"cidr": "10.0.0.0/24"}, "10.0.0.255", True),
        ({"cidr": "10.0.0.0/24"}, "10.0.1.0", False),
        ({"cidr": "2001:db8::/32"}, "2001:db8:1234::1", True),
        ({"cidr": "2001:db8::/32"}, "10.0.0.1", False),
        ({"cidr": "10.0.0.0/24"}, "not an address", False),
    ],
)
def test_string_matching_in_both_scopes(condition: Any, value: Any, expected: bool) -> None:
    assert passes({"sport": [condition]}, attributes={"sport": value}) is expected
    assert passes({"sport": [condition]}, body={"sport": value}) is expected


def test_a_string_array_attribute_passes_when_one_element_does() -> None:
    array = {"types": {"sport": "String.Array"}}
    assert passes({"sport": ["rugby"]}, attributes={"sport": '["rugby", "golf"]'}, **array)
    assert not passes({"sport": ["rugby"]}, attributes={"sport": '["golf"]'}, **array)
    # anything-but: an element that is none of them (AWS's documented example)
    but = {"sport": [{"anything-but": ["rugby", "tennis"]}]}
    assert passes(but, attributes={"sport": '["rugby", "baseball"]'}, **array)
    assert not passes(but, attributes={"sport": '["rugby", "tennis"]'}, **array)
    numbers = {"types": {"price": "Number.Array"}}
    assert passes({"price": [{"numeric": ["<", 60]}]}, attributes={"price": "[100, 50]"}, **numbers)
    # a text that is not an array holds nothing
    assert not passes({"sport": [{"exists": True}]}, attributes={"sport": "[oops"}, **array)


# -- numbers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "value", "expected"),
    [
        (301.5, 301.5, True),
        (1e9, 1_000_000_000, True),
        (5, 5.000001, True),  # five decimal places
        (5, 5.0001, False),
        ({"numeric": ["=", 301.5]}, 301.5, True),
        ({"numeric": ["<", 0]}, -1, True),
        ({"numeric": ["<", 0]}, 0, False),
        ({"numeric": [">", 0, "<=", 150]}, 150, True),
        ({"numeric": [">", 0, "<=", 150]}, 0, False),
        ({"numeric": [">=", 0, "<", 150]}, 0, True),
        ({"numeric": [">=", 0, "<", 150]}, "100", False),  # a text is no number
        ({"anything-but": [100, 500]}, 101, True),
        ({"anything-but": [100, 500]}, 100.0, False),
    ],
)
def test_numeric_matching_in_both_scopes(condition: Any, value: Any, expected: bool) -> None:
    assert passes({"price": [condition]}, attributes={"price": value}) is expected
    assert passes({"price": [condition]}, body={"price": value}) is expected


def test_a_number_attribute_kept_as_written_compares_as_a_number() -> None:
    typed = {"types": {"price": "Number"}}
    assert passes({"price": [{"numeric": [">", 1]}]}, attributes={"price": "1.50"}, **typed)
    assert passes({"price": [1.5]}, attributes={"price": "1.50"}, **typed)


# -- exists, booleans, null --------------------------------------------------------------


def test_exists_says_whether_the_key_holds_a_value() -> None:
    there, absent = {"store": [{"exists": True}]}, {"store": [{"exists": False}]}
    assert passes(there, attributes={"store": "x"})
    assert not passes(there, attributes={"other": "x"})
    assert passes(absent, attributes={"other": "x"}) and passes(absent, attributes={})
    assert not passes(there, attributes={"store": b"bytes"})  # binary takes no part
    assert passes(there, body={"store": None})  # null is a value
    assert not passes(there, body={"store": []}) and passes(absent, body={"store": {}})
    # anything-but never matches what is absent; with exists false, it may
    but = {"store": [{"anything-but": "a"}]}
    assert not passes(but, attributes={})
    assert passes({"store": [{"anything-but": "a"}, {"exists": False}]}, attributes={})


def test_booleans_and_null_match_themselves_in_a_body() -> None:
    assert passes({"ok": [True]}, body={"ok": True})
    assert not passes({"ok": [True]}, body={"ok": 1})  # a number is no boolean
    assert not passes({"ok": [1]}, body={"ok": True})
    assert passes({"gone": [None]}, body={"gone": None})
    assert not passes({"gone": [None]}, body={"other": 1})  # absent is not null
    assert not passes({"gone": [None]}, attributes={})


# -- bodies ------------------------------------------------------------------------------


def test_a_body_policy_nests_keys_and_dotted_keys_say_the_same() -> None:
    event = {"detail": {"order": {"total": 120, "region": "eu-west"}}}
    nested = {"detail": {"order": {"total": [{"numeric": [">", 100]}]}}}
    dotted = {"detail.order.region": [{"prefix": "eu-"}]}
    assert passes(nested, body=event) and passes(dotted, body=event)
    assert passes({"detail": {"order.total": [120]}}, body={"detail": {"order.total": 120}})
    assert not passes(nested, body={"detail": {"order": {"total": 50}}})


def test_a_body_array_passes_when_one_item_does() -> None:
    records = {
        "Records": [
            {"eventName": "ObjectRemoved:Delete", "s3": {"object": {"key": "home-1.xml"}}},
            {"eventName": "ObjectCreated:Put", "s3": {"object": [[{"key": "auto-2.xml"}]]}},
        ]
    }
    policy = {
        "Records": {
            "s3": {"object": {"key": [{"prefix": "auto-"}]}},
            "eventName": [{"prefix": "ObjectCreated:"}],
        }
    }
    assert passes(policy, body=records)
    assert passes({"route": ["queue1"]}, body={"route": ["queue2", "queue1"]})
    assert not passes({"route": ["queue3"]}, body={"route": ["queue2", "queue1"]})
    assert passes({"detail": {"v": [""]}}, body={"resources": [], "detail": {"v": ""}})


def test_a_body_that_is_not_a_json_object_passes_no_body_policy() -> None:
    absent = {"a": [{"exists": False}]}
    assert passes(absent, body={"b": 1})
    for raw in (b"plain text", b"[1, 2]", b'"a"', b""):
        assert not passes(absent, body=raw)


# -- $or ---------------------------------------------------------------------------------


def test_or_passes_when_one_of_its_policies_does() -> None:
    policy = {
        "source": ["aws.cloudwatch"],
        "$or": [{"metricName": ["CPUUtilization"]}, {"namespace": [{"prefix": "AWS/"}]}],
    }
    assert passes(policy, attributes={"source": "aws.cloudwatch", "metricName": "CPUUtilization"})
    assert passes(policy, attributes={"source": "aws.cloudwatch", "namespace": "AWS/EC2"})
    assert not passes(policy, attributes={"source": "aws.cloudwatch", "namespace": "Mine"})
    assert not passes(policy, attributes={"source": "other", "metricName": "CPUUtilization"})
    nested = {"a": {"$or": [{"b": [1]}, {"c": {"$or": [{"d": [2]}, {"e": [3]}]}}]}}
    assert passes(nested, body={"a": {"c": {"e": 3}}})
    assert not passes(nested, body={"a": {"c": {"e": 4}, "b": 2}})


# -- refusals and limits --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"key": [["value"]]}, "Match value must be String, number, true, false, or null"),
        ({"key": [{"wrong-operator": True}]}, "Unrecognized match type wrong-operator"),
        ({"key": [{"suffix": "v", "prefix": "w"}]}, "Only one key allowed in match expression"),
        ({"key": [{"suffix": 1}]}, "suffix match pattern must be a string"),
        ({"key": [{"equals-ignore-case": 1}]}, "equals-ignore-case match pattern must be a string"),
        ({"key": [{"exists": "yes"}]}, "exists match pattern must be either true or false."),
        ({"key": []}, "Empty arrays are not allowed"),
        ({"key": "value"}, '"key" must be an object or an array'),
        (
            {"key": [{"anything-but": {"exists": False}}]},
            "Unsupported anything-but pattern: exists",
        ),
        ({"key": [{"numeric": []}]}, "Invalid member in numeric match: ]"),
        ({"key": [{"numeric": [1]}]}, "Invalid member in numeric match: 1"),
        ({"key": [{"numeric": ["operator", 1]}]}, "Unrecognized numeric range operator: operator"),
        ({"key": [{"numeric": ["=", "1"]}]}, "Value of equals must be numeric"),
        ({"key": [{"numeric": ["<", 1, ">", 2]}]}, "Too many elements in numeric expression"),
        ({"key": [{"numeric": [">", 1, 30]}]}, "Bad value in numeric range: 30"),
        ({"key": [{"numeric": [">", 1, "test", 2]}]}, "Bad numeric range operator: test"),
        ({"key": [{"numeric": [">", 10, "<", 5]}]}, "Bottom must be less than top"),
        ({"key": [{"numeric": [">", 1, "<", 5, 6]}]}, "Too many terms in numeric range expression"),
        ({"key": [{"cidr": "10.0.0.1"}]}, "Malformed CIDR, one '/' required"),
        ({"key": [{"cidr": "10.0.0.0/x"}]}, "Malformed CIDR, mask bits must be an integer"),
        ({"key": [{"cidr": "xx.11.xx/24"}]}, "Nonstandard IP address: xx.11.xx"),
        ({f"k{i}": ["v"] for i in range(6)}, "Filter policy can not have more than 5 keys"),
        ({"key": [f"v{i}" for i in range(151)]}, "Filter policy is too complex"),
        ({"a": [f"v{i}" for i in range(100)], "b": ["x", "y"]}, "Filter policy is too complex"),
    ],
)
def test_a_refused_policy_says_why_in_sns_words(spec: dict[str, Any], said: str) -> None:
    with pytest.raises(Invalid) as refused:
        FilterPolicy(spec, "body")
    assert str(refused.value).partition("\n")[0] == said


def test_combinations_count_depth_and_add_up_or_branches() -> None:
    # AWS's example: 4 values three deep, 3 two deep, 3 at the top: 12 x 6 x 3 = 216
    nested = {
        "key_a": {"key_b": {"key_c": ["1", "2", "3", "4"]}},
        "key_d": {"key_e": ["1", "2", "3"]},
        "key_f": ["1", "2", "3"],
    }
    with pytest.raises(Invalid, match="too complex"):
        FilterPolicy(nested, "body")
    FilterPolicy({**nested, "key_f": ["1", "2"]}, "body")  # 144
    wide = [f"v{i}" for i in range(75)]
    FilterPolicy({"$or": [{"a": wide}, {"b": wide}]})  # 150
    with pytest.raises(Invalid, match="too complex"):
        FilterPolicy({"$or": [{"a": wide}, {"b": [*wide, "w"]}]})


def test_attributes_have_no_nested_keys_and_v2_takes_bare_values() -> None:
    with pytest.raises(Invalid) as refused:
        FilterPolicy({"a": {"b": ["c"]}})
    assert refused.value.field == "filter_scope"
    assert "does not support nested filter policy" in str(refused.value)
    lenient = FilterPolicy({"a": "x", "n": {"numeric": [">", 1]}}, lenient=True)
    assert lenient.matches(Subject({"a": "x", "n": 2}))
    assert not lenient.matches(Subject({"a": "x", "n": 1}))


def test_a_stored_policy_is_read_back_beyond_todays_limits() -> None:
    """Filters kept before SNS's limits applied (v2 took 16 keys) still load."""
    wide = {f"k{i}": "v" for i in range(16)}
    with pytest.raises(Invalid):
        Subscription.parse("q", None, wide)
    kept = Subscription.decode("q", json.dumps({"filter": wide}).encode())
    assert kept.filter is not None and kept.filter.matches(Subject(dict.fromkeys(wide, "v")))


def test_a_body_subscription_round_trips_and_routes_by_its_body() -> None:
    sub = Subscription.parse("q", None, {"kind": ["order"]}, scope="body")
    again = Subscription.decode("q", sub.encode())
    assert again == sub and again.to_dict()["filter_scope"] == "body"
    topic = Topic([again, Subscription.parse("a", None, {"kind": ["order"]})])
    by_body = Subject(body=b'{"kind": "order"}')
    by_attribute = Subject({"kind": "order"}, body=b"{}")
    assert topic.route(None, by_body) == ["q"]
    assert topic.route(None, by_attribute) == ["a"]


def test_an_indexed_filter_still_finds_a_string_array_element() -> None:
    """The router indexes policies by exact texts; an array attribute is looked up
    element by element."""
    topic = Topic(
        [
            Subscription.parse("rugby", None, {"sport": ["rugby"]}),
            Subscription.parse("golf", None, {"sport": ["golf"]}),
        ]
    )
    both = Subject({"sport": '["golf", "rugby"]'}, {"sport": "String.Array"})
    assert topic.route(None, both) == ["golf", "rugby"]
    assert topic.route(None, Subject({"sport": "golf"})) == ["golf"]


def test_numbers_beyond_a_float_are_no_numbers_and_break_nothing() -> None:
    """JSON's Infinity and NaN, and literals too large for a float, neither match numbers
    nor fail a publish; in a policy they are refused."""
    for raw in (b'{"n": 1e400}', b'{"n": Infinity}', b'{"n": NaN}', b'{"n": -1e400}'):
        assert not passes({"n": [{"numeric": [">", 0]}]}, body=raw)
        assert passes({"n": [{"exists": True}]}, body=raw)  # a value all the same
    assert passes({"n": [{"numeric": [">", 1e300]}]}, body={"n": 1.7e308})
    assert passes({"n": [10**30]}, body=b'{"n": 1000000000000000000000000000000}')
    with pytest.raises(Invalid, match="Match value must be"):
        FilterPolicy(json.loads('{"n": [Infinity]}'), "body")
    with pytest.raises(Invalid, match="Value of > must be numeric"):
        FilterPolicy(json.loads('{"n": [{"numeric": [">", NaN]}]}'), "body")


def test_a_body_nested_beyond_reading_passes_no_body_policy() -> None:
    absent = {"a": [{"exists": False}]}
    assert not passes(absent, body=b"[" * 100_000)
    deep = b'{"x": ' * 5_000 + b"1" + b"}" * 5_000
    assert not passes(absent, body=deep)


def test_a_policy_nested_too_deep_is_too_complex() -> None:
    deep: dict[str, Any] = {"leaf": ["x"]}
    for _ in range(3_000):
        deep = {"k": deep}
    for limits in (True, False):
        with pytest.raises(Invalid, match="too complex"):
            FilterPolicy(deep, "body", limits=limits)


def test_a_refusal_says_where_sns_s_parser_stood_showing_500_characters_of_the_policy() -> None:
    long = {"padding": [f"v{i:03}" for i in range(80)], "key": [{"numeric": [">", 3, "<", 1]}]}
    text = json.dumps(long, separators=(",", ":"))
    with pytest.raises(Invalid) as refused:
        FilterPolicy(long, "body", limits=False)
    reason, _, where = str(refused.value).partition("\n")
    assert reason == "Bottom must be less than top"
    column = text.index("]}]}") + 2  # just past the numeric array's bracket, counted from 1
    assert where == (
        f' at [Source: (String)"{text[:500]}"[truncated {len(text) - 500} chars]; '
        f"line: 1, column: {column}]"
    )
    with pytest.raises(Invalid) as lenient:  # v2's policies: the reason alone
        FilterPolicy(long, "body", lenient=True, limits=False)
    assert str(lenient.value) == reason
