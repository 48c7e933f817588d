"""A topic's subscriptions and the routing of a published message through them (pure).

A subscription may carry a routing-key ``pattern`` (``patterns``) and a
``filter`` policy on the message's attributes or body (``filters``); one
with neither takes every message.
A ``Topic`` is immutable: the catalog replaces it on each change, and its
router (the patterns' trie) is built once per version, on first use.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dynamiq.core.push.documents import PushEndpoint
from dynamiq.core.routing.filters import FilterPolicy, FilterScope, Subject
from dynamiq.core.routing.patterns import PatternTrie, check_pattern
from dynamiq.errors import Invalid
from dynamiq.models.topics import TopicSettings

__all__ = ["ARCHIVE_PREFIX", "Subscription", "Topic", "archive_queue"]

REACHED_KEYS = 1024  # routing keys whose subscriptions a topic keeps worked out
ARCHIVE_PREFIX = "archive~"  # no queue a client names has a "~"


def archive_queue(topic: str) -> str:
    """The queue that keeps ``topic``'s archive (``core.archives``), the node's own."""
    return ARCHIVE_PREFIX + topic


@dataclass(frozen=True, slots=True)
class Subscription:
    """A queue's subscription to a topic: what it takes of the topic's messages."""

    queue: str
    pattern: str | None = None
    filter: FilterPolicy | None = None
    envelope: bool = False  # the queue gets each message as an SNS notification
    endpoint: PushEndpoint | None = None  # a push subscription's (``queue`` is its own)

    @property
    def routed(self) -> bool:
        """Whether it takes messages now: a push subscription only once confirmed."""
        return self.endpoint is None or self.endpoint.confirmed

    @classmethod
    def parse(
        cls,
        queue: str,
        pattern: object = None,
        spec: object = None,
        envelope: object = False,
        scope: FilterScope = "attributes",
        stored: bool = False,
        lenient: bool = True,
        endpoint: PushEndpoint | None = None,
    ) -> Subscription:
        """Return a validated subscription (``Invalid`` naming the field otherwise); a
        ``stored`` one's filter is not held to today's limits again, and only a
        ``lenient`` one takes bare match values (v2's)."""
        checked = None if pattern is None else check_pattern(pattern)
        if not isinstance(envelope, bool):
            raise Invalid("envelope must be true or false", "envelope")
        policy = None
        if spec is not None:
            policy = FilterPolicy(spec, scope, lenient=lenient, limits=not stored)
        return cls(queue, checked, policy, envelope, endpoint)

    @staticmethod
    def decode(queue: str, raw: bytes) -> Subscription:
        """Return the subscription stored as ``raw`` (empty: takes everything).

        Every catalog reload reads every subscription again: one that did not
        change comes from a cache, the same object as before.
        """
        return _decoded(queue, raw)

    def encode(self) -> bytes:
        """Return the stored form (empty for a subscription that takes everything)."""
        data = self.to_dict()
        del data["queue"]
        return json.dumps(data).encode() if data else b""

    def to_dict(self) -> dict[str, Any]:
        """Return the subscription as JSON-ready data, without what it does not set."""
        out: dict[str, Any] = {"queue": self.queue}
        if self.pattern is not None:
            out["pattern"] = self.pattern
        if self.filter is not None:
            out["filter"] = self.filter.spec
            if self.filter.scope != "attributes":
                out["filter_scope"] = self.filter.scope
        if self.envelope:
            out["envelope"] = True
        if self.endpoint is not None:
            out["endpoint"] = self.endpoint.to_dict()
        return out


@functools.lru_cache(maxsize=8192)
def _decoded(queue: str, raw: bytes) -> Subscription:
    if not raw:
        return Subscription(queue)
    data: dict[str, Any] = json.loads(raw)
    return Subscription.parse(
        queue,
        data.get("pattern"),
        data.get("filter"),
        data.get("envelope", False),
        data.get("filter_scope", "attributes"),
        stored=True,
        endpoint=PushEndpoint.from_dict(data["endpoint"]) if "endpoint" in data else None,
    )


class Topic:
    """The subscriptions of one topic, by queue, and its settings; routes messages to
    the subscriptions."""

    def __init__(
        self, subscriptions: Iterable[Subscription] = (), settings: TopicSettings | None = None
    ) -> None:
        self.subscriptions: Mapping[str, Subscription] = {s.queue: s for s in subscriptions}
        self.settings = settings or TopicSettings()
        # The subscribed queues, sorted: sorted once, then carried to each version a
        # subscription makes, one name put in or taken out (never changed in place).
        self._names: list[str] | None = None

    def queues(self) -> list[str]:
        """Return the subscribed queues, sorted."""
        return list(self._sorted())

    def listed(self, after: str = "") -> Iterator[Subscription]:
        """The subscriptions, sorted by queue: from the first, or from the one after
        the queue ``after`` (a page of a wide topic costs the page alone)."""
        names, subscriptions = self._sorted(), self.subscriptions
        start = bisect.bisect_right(names, after) if after else 0
        return (subscriptions[q] for q in itertools.islice(names, start, None))

    def _sorted(self) -> list[str]:
        if self._names is None:
            self._names = sorted(self.subscriptions)
        return self._names

    def kept_if_same(self, subscriptions: Iterable[Subscription], settings: TopicSettings) -> Topic:
        """This topic when it has exactly ``subscriptions`` and ``settings`` (its
        compiled router with it), else a new topic of them."""
        fresh = Topic(subscriptions, settings)
        same = fresh.subscriptions == self.subscriptions and fresh.settings == self.settings
        return self if same else fresh

    def with_subscription(self, subscription: Subscription) -> Topic:
        """Return this topic with ``subscription`` added or replaced."""
        queue, names = subscription.queue, self._names
        if names is not None and queue not in self.subscriptions:
            names = names.copy()  # at C speed, as the dict's: wide topics grow by one
            bisect.insort(names, queue)
        subscriptions = dict(self.subscriptions)
        subscriptions[queue] = subscription
        return self._with(subscriptions, names)

    def without(self, queue: str) -> Topic:
        """Return this topic without the subscription of ``queue``."""
        names = self._names
        if names is not None and queue in self.subscriptions:
            names = names.copy()
            del names[bisect.bisect_left(names, queue)]
        subscriptions = dict(self.subscriptions)
        subscriptions.pop(queue, None)
        return self._with(subscriptions, names)

    def _with(self, subscriptions: dict[str, Subscription], names: list[str] | None) -> Topic:
        topic = Topic(settings=self.settings)
        topic.subscriptions, topic._names = subscriptions, names
        return topic

    def with_settings(self, settings: TopicSettings) -> Topic:
        """Return this topic with other settings (the same subscriptions)."""
        return Topic(self.subscriptions.values(), settings)

    def route(self, key: str | None, subject: Subject | None = None) -> list[str]:
        """Return the queues (sorted) that take a message with this key, as filters see
        it (``subject``: no attributes and no body by default)."""
        return self.route_all([(key, subject or Subject())])[0]

    def route_all(
        self,
        messages: Sequence[tuple[str | None, Subject]],
        filtered_out: Counter[str] | None = None,
    ) -> list[list[str]]:
        """Route each ``(key, subject)`` (a batch's messages often share their key);
        count in ``filtered_out`` the copies each filter kept from its queue, by why
        (``_why``).

        A message's routing key picks the subscriptions by pattern (the trie,
        once per distinct key); of those with a filter, only the ones it may
        pass are tested: the filters indexed by an exact text one of its
        attributes holds, and those that cannot be indexed.
        """
        router = self._router
        by_key: dict[str | None, _Reached] = {}
        out = []
        for key, subject in messages:
            taken = by_key.get(key)
            if taken is None:
                taken = by_key[key] = router.reached(key)
            if not router.filters:
                out.append(list(taken.ordered))
                continue
            passed = {
                q
                for q in router.candidates(subject)
                if q in taken.every and router.filters[q].matches(subject)
            }
            out.append(sorted(taken.plain | passed))
            if filtered_out is not None:
                kept = Counter(taken.filtered)
                kept.subtract(router.filters[q].scope for q in passed)
                for scope, n in kept.items():
                    if n:
                        filtered_out[_why(scope, subject)] += n
        return out

    @functools.cached_property
    def enveloped(self) -> frozenset[str]:
        """The queues that get each message as an SNS notification."""
        return frozenset(q for q, s in self.subscriptions.items() if s.envelope)

    @functools.cached_property
    def pushed(self) -> frozenset[str]:
        """The push subscriptions' own queues (a copy there is delivered when its
        endpoint takes it)."""
        return frozenset(q for q, s in self.subscriptions.items() if s.endpoint is not None)

    @functools.cached_property
    def own(self) -> frozenset[str]:
        """The queues of the node's own among the subscribed: the push subscriptions'
        and the archive's (no client is told of their copies)."""
        return self.pushed | {q for q in self.subscriptions if q.startswith(ARCHIVE_PREFIX)}

    @functools.cached_property
    def _router(self) -> _Router:
        return _Router(self.subscriptions.values())


def _why(scope: FilterScope, subject: Subject) -> str:
    """Why a message did not pass a filter of ``scope``, as SNS tells it: the policy on
    its attributes or its body, no attributes at all, or a body that is no JSON object."""
    if scope == "body":
        return "body" if subject.has_object_body() else "invalid_body"
    return "attributes" if subject.attributes else "no_attributes"


@dataclass(frozen=True, slots=True)
class _Reached:
    """The subscriptions a routing key reaches: ``every`` one, the ``plain`` ones (no
    filter) also in order, and how many of the filtered ones are of each scope."""

    every: frozenset[str]
    plain: frozenset[str]
    ordered: tuple[str, ...]
    filtered: Mapping[FilterScope, int]


class _Router:
    """A topic's subscriptions compiled for routing."""

    def __init__(self, subs: Iterable[Subscription]) -> None:
        subs = [s for s in subs if s.routed]
        self.every = frozenset(s.queue for s in subs if s.pattern is None)
        patterned = [(s.pattern, s.queue) for s in subs if s.pattern is not None]
        self.trie = PatternTrie(patterned) if patterned else None
        self.filters = {s.queue: s.filter for s in subs if s.filter is not None}
        self.by_value: dict[str, dict[str, set[str]]] = {}
        unindexed: set[str] = set()
        for queue, policy in self.filters.items():
            anchor = policy.anchor()
            if anchor is None:
                unindexed.add(queue)
                continue
            name, values = anchor
            for value in values:
                self.by_value.setdefault(name, {}).setdefault(value, set()).add(queue)
        self.unindexed = frozenset(unindexed)
        self._reached: dict[str | None, _Reached] = {}

    def reached(self, key: str | None) -> _Reached:
        """The subscriptions a message with routing key ``key`` reaches (worked out once
        per key: a wide topic's publishes reach the same thousands of queues)."""
        found = self._reached.get(key)
        if found is not None:
            return found
        every = frozenset(self.every | self.trie.match(key) if self.trie else self.every)
        plain = every - self.filters.keys()
        filtered = Counter(self.filters[q].scope for q in every - plain)
        if len(self._reached) >= REACHED_KEYS:
            self._reached.clear()
        found = self._reached[key] = _Reached(every, plain, tuple(sorted(plain)), filtered)
        return found

    def candidates(self, subject: Subject) -> set[str]:
        """The filtered subscriptions the message ``subject`` shows may pass."""
        found = set(self.unindexed)
        if subject.attributes:
            for name, index in self.by_value.items():
                for value in subject.attribute(name):
                    if isinstance(value, str):
                        found |= index.get(value, set())
        return found
