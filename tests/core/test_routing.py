"""Routing-key patterns and filter policies against plain reference readings of
their rules (AMQP topic exchanges; SNS filter policies)."""

from __future__ import annotations

import operator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynamiq.core.catalog import Catalog
from dynamiq.core.routing.filters import FilterPolicy, Subject
from dynamiq.core.routing.patterns import PatternTrie, check_pattern
from dynamiq.core.routing.subscriptions import Subscription, Topic
from dynamiq.errors import Invalid
from dynamiq.storage.lmdb import LmdbBackend

# -- patterns ---------------------------------------------------------------


def _words(text: str) -> list[str]:
    return text.split(".") if text else []


def reference_match(pattern: list[str], key: list[str]) -> bool:
    """The AMQP rule read literally: '*' one word, '#' zero or more."""
    if not pattern:
        return not key
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(reference_match(rest, key[i:]) for i in range(len(key) + 1))
    if not key:
        return False
    return (head in ("*", key[0])) and reference_match(rest, key[1:])


WORD = st.sampled_from(["a", "b", "cc", ""])
KEYS = st.lists(WORD, max_size=6).map(".".join)
PATTERNS = st.lists(st.one_of(WORD, st.sampled_from(["*", "#"])), max_size=6).map(".".join)


@settings(max_examples=400)
@given(st.lists(PATTERNS, min_size=1, max_size=12), st.lists(KEYS, min_size=1, max_size=8))
def test_the_trie_matches_as_the_amqp_rules_say(patterns: list[str], keys: list[str]) -> None:
    trie = PatternTrie((p, i) for i, p in enumerate(patterns))
    for key in keys:
        expected = {i for i, p in enumerate(patterns) if reference_match(_words(p), _words(key))}
        assert trie.match(key) == expected, key


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("orders.*.created", "orders.eu.created", True),
        ("orders.*.created", "orders.created", False),
        ("orders.#", "orders", True),
        ("orders.#", "orders.eu.created", True),
        ("#.created", "created", True),
        ("#", "", True),
        ("*", "", False),
        ("#.#", "a.b", True),
        ("a.#.b.#.c", "a.x.b.y.z.c", True),
        ("a.#.b.#.c", "a.x.c.b", False),
    ],
)
def test_patterns_by_example(pattern: str, key: str, matches: bool) -> None:
    assert PatternTrie([(pattern, "q")]).match(key) == ({"q"} if matches else set())


@pytest.mark.parametrize("pattern", ["orders.*s", "a.#b", "x" * 256])
def test_a_bad_pattern_is_refused_naming_the_field(pattern: str) -> None:
    with pytest.raises(Invalid) as caught:
        check_pattern(pattern)
    assert caught.value.field == "pattern"


# -- filter policies -----------------------------------------------------------


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(a: object, b: object) -> bool:
    return (isinstance(a, str) and isinstance(b, str) and a == b) or (
        _number(a) and _number(b) and a == b
    )


COMPARE: dict[str, Any] = {
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def reference_condition(condition: Any, present: bool, value: object) -> bool:
    """One SNS condition, read from its JSON."""
    if isinstance(condition, str) or _number(condition):
        return present and _same(value, condition)
    ((kind, arg),) = condition.items()
    if kind == "exists":
        return present is arg
    if not present:
        return False
    if kind == "prefix":
        return isinstance(value, str) and value.startswith(arg)
    if kind == "anything-but":
        return not any(_same(value, v) for v in (arg if isinstance(arg, list) else [arg]))
    pairs = [(arg[i], arg[i + 1]) for i in range(0, len(arg), 2)]
    return _number(value) and all(COMPARE[op](value, n) for op, n in pairs)


def reference_filter(spec: dict[str, Any], attributes: dict[str, Any]) -> bool:
    for name, stated in spec.items():
        value = attributes.get(name)
        present = name in attributes and not isinstance(value, bytes)
        conditions = stated if isinstance(stated, list) else [stated]
        if not any(reference_condition(c, present, value) for c in conditions):
            return False
    return True


NAME = st.sampled_from(["colour", "size", "region"])
TEXT = st.sampled_from(["red", "re", "blue", "", "eu-west", "eu"])
NUMBER = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, -1.5, 2.0]))
VALUE = st.one_of(TEXT, NUMBER, st.just(b"red"))
LOWER, UPPER = st.sampled_from([">", ">="]), st.sampled_from(["<", "<="])
NUMERIC = st.one_of(
    st.tuples(st.just("="), NUMBER).map(list),
    st.tuples(st.sampled_from(["<", "<=", ">", ">="]), NUMBER).map(list),
    # a range's bottom is below its top (SNS refuses any other)
    st.tuples(LOWER, NUMBER, UPPER, NUMBER).filter(lambda r: r[1] < r[3]).map(list),
)
CONDITION = st.one_of(
    TEXT,
    NUMBER,
    TEXT.map(lambda t: {"prefix": t}),
    st.booleans().map(lambda b: {"exists": b}),
    st.one_of(st.lists(st.one_of(TEXT, NUMBER), min_size=1, max_size=3), TEXT).map(
        lambda v: {"anything-but": v}
    ),
    NUMERIC.map(lambda n: {"numeric": n}),
)
SPECS = st.dictionaries(
    NAME, st.one_of(CONDITION, st.lists(CONDITION, min_size=1, max_size=3)), min_size=1
)
ATTRIBUTES = st.dictionaries(NAME, VALUE)


@settings(max_examples=600)
@given(SPECS, st.lists(ATTRIBUTES, min_size=1, max_size=6))
def test_filter_policies_match_as_the_reference_says(
    spec: dict[str, Any], messages: list[dict[str, Any]]
) -> None:
    policy = FilterPolicy(spec, lenient=True)  # v2's bare match values among them
    for attributes in messages:
        assert policy.matches(Subject(attributes)) == reference_filter(spec, attributes)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({}, "filter"),
        ({"a": []}, "filter"),
        ({"a": True}, "filter"),
        ({"a": [{"prefix": 3}]}, "filter"),
        ({"a": {"prefix": "x"}}, "filter"),  # read whole first: "prefix" holds no list
        ({"a": {"b": ["x"]}}, "filter_scope"),  # a nested key, where attributes have none
        ({"a": [{"numeric": ["<", 1, ">", 0]}]}, "filter"),
        ({"a": [{"anything-but": [{"prefix": "x"}]}]}, "filter"),
        ({"a": [{"exists": "yes"}]}, "filter"),
        ({"a": [{"prefix": "x", "exists": True}]}, "filter"),
        ({f"k{i}": ["v"] for i in range(6)}, "filter"),
    ],
)
def test_a_bad_filter_is_refused_naming_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(Invalid) as caught:
        FilterPolicy(spec)
    assert caught.value.field == field


# -- topics ------------------------------------------------------------------------


def test_a_topic_routes_by_pattern_and_filter_and_keeps_the_rest_taking_everything() -> None:
    topic = Topic(
        [
            Subscription.parse("all"),
            Subscription.parse("eu", "orders.eu.*"),
            Subscription.parse("big", "orders.#", {"total": {"numeric": [">=", 100]}}),
        ]
    )
    assert topic.route("orders.eu.created", Subject({"total": 5})) == ["all", "eu"]
    assert topic.route("orders.us.created", Subject({"total": 500})) == ["all", "big"]
    assert topic.route(None) == ["all"]
    changed = topic.with_subscription(Subscription.parse("all", "audit.#"))
    assert changed.route(None) == [] and topic.route(None) == ["all"]
    assert changed.without("eu").queues() == ["all", "big"]


def test_a_subscription_round_trips_through_its_stored_form() -> None:
    sub = Subscription.parse("q", "a.*", {"x": [{"prefix": "p"}, 3]})
    again = Subscription.decode("q", sub.encode())
    assert (
        again.to_dict()
        == sub.to_dict()
        == {
            "queue": "q",
            "pattern": "a.*",
            "filter": {"x": [{"prefix": "p"}, 3]},
        }
    )
    assert Subscription.parse("q").encode() == b""  # as subscriptions were stored before
    assert Subscription.decode("q", b"").to_dict() == {"queue": "q"}


SUBSCRIPTIONS = st.lists(
    st.tuples(st.one_of(st.none(), PATTERNS), st.one_of(st.none(), SPECS)), max_size=10
)


@settings(max_examples=400)
@given(SUBSCRIPTIONS, st.lists(st.tuples(KEYS, ATTRIBUTES), min_size=1, max_size=8))
def test_a_topic_routes_each_message_to_exactly_the_subscriptions_that_take_it(
    subscriptions: list[tuple[str | None, dict[str, Any] | None]],
    messages: list[tuple[str, dict[str, Any]]],
) -> None:
    topic = Topic(Subscription.parse(f"q{i}", p, f) for i, (p, f) in enumerate(subscriptions))
    expected = [
        [
            f"q{i}"
            for i, (pattern, spec) in enumerate(subscriptions)
            if (pattern is None or reference_match(_words(pattern), _words(key)))
            and (spec is None or reference_filter(spec, attributes))
        ]
        for key, attributes in messages
    ]
    subjects = [(key, Subject(attributes)) for key, attributes in messages]
    assert topic.route_all(subjects) == [sorted(e) for e in expected]


def test_subscriptions_differing_only_in_their_filter_are_not_equal() -> None:
    one, two = ({"x": ["1"]}, {"x": ["2"]})
    assert Subscription.parse("q", "a.*", one) != Subscription.parse("q", "a.*", two)
    assert Subscription.parse("q", "a.*", one) == Subscription.parse("q", "a.*", dict(one))


async def test_a_reload_keeps_an_unchanged_topic_and_its_router(store: LmdbBackend) -> None:
    catalog = Catalog(store)
    for name in ("q", "r"):
        await catalog.create_queue(name)
        await catalog.create_topic(f"t-{name}")
        await catalog.subscribe(f"t-{name}", name, "a.*", {"x": ["1"]})
    await catalog.reload()
    before = {name: catalog.topic(f"t-{name}") for name in ("q", "r")}
    assert before["q"].route("a.b", Subject({"x": "1"})) == ["q"]  # its router is compiled now
    other = Catalog(store)  # another node changes what r takes
    await other.reload()
    await other.subscribe("t-r", "r", "b.*")
    await catalog.reload()
    assert catalog.topic("t-q") is before["q"]
    assert catalog.topic("t-r") is not before["r"]
    assert catalog.topic("t-r").route("b.c") == ["r"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.sampled_from([f"q{i}" for i in range(12)])), max_size=40),
    st.sampled_from(["", "q", "q1", "q5", "q9", "z"]),
)
def test_a_topic_keeps_its_queues_sorted_through_every_change(
    changes: list[tuple[bool, str]], after: str
) -> None:
    topic = Topic()
    topic.queues()  # sorted once here: every change after keeps the order up
    subscribed: set[str] = set()
    for adds, queue in changes:
        if adds:
            topic = topic.with_subscription(Subscription(queue))
            subscribed.add(queue)
        else:
            topic = topic.without(queue)
            subscribed.discard(queue)
        assert topic.queues() == sorted(subscribed)
    tail = [q for q in sorted(subscribed) if q > after]
    assert [s.queue for s in topic.listed(after)] == tail
    assert [s.queue for s in Topic(topic.subscriptions.values()).listed(after)] == tail
