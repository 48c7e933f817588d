"""The topics a process knows, with their push subscriptions indexed by queue.

A topic is replaced whole (a read found it, or its settings changed) or one
subscription at a time (a subscribe, an unsubscribe, a deleted queue): then
only that subscription's entry in the push index is looked at, so a change
to a topic of a hundred thousand subscriptions costs one.
"""

from __future__ import annotations

from collections.abc import ItemsView

from dynamiq.core.push.documents import push_queue
from dynamiq.core.routing.subscriptions import Subscription, Topic

__all__ = ["TopicIndex"]


class TopicIndex:
    """Every topic by name, and every push subscription by its own queue."""

    def __init__(self) -> None:
        self._topics: dict[str, Topic] = {}
        self._pushes: dict[str, tuple[str, Subscription]] = {}  # by queue: topic, sub

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def names(self) -> list[str]:
        """Every topic, sorted."""
        return sorted(self._topics)

    def items(self) -> ItemsView[str, Topic]:
        return self._topics.items()

    def pushes(self) -> list[tuple[str, Subscription]]:
        """Every push subscription with its topic, by subscription id."""
        return [self._pushes[queue] for queue in sorted(self._pushes)]

    def push(self, subscription: str) -> tuple[str, Subscription] | None:
        """The push subscription of this id with its topic, or None."""
        return self._pushes.get(push_queue(subscription))

    def keep(self, name: str, topic: Topic | None, changed: str | None = None) -> None:
        """Keep ``topic`` (None: gone); ``changed``: only the subscription of that queue
        differs from the topic kept before."""
        before = self._topics.pop(name, None)
        if before is not None:
            for queue in before.subscriptions if changed is None else (changed,):
                if (held := self._pushes.get(queue)) is not None and held[0] == name:
                    del self._pushes[queue]
        if topic is not None:
            self._topics[name] = topic
            every = topic.subscriptions
            kept = every.values() if changed is None else [every.get(changed)]
            for s in kept:
                if s is not None and s.endpoint is not None:
                    self._pushes[s.queue] = (name, s)
