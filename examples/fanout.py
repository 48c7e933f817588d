"""Fan-out: one topic, three queues, each taking the orders it is for.

    make run                                        # a node on :8081 (another terminal)
    .venv/bin/python examples/fanout.py --orders 60

Orders are published once, to the ``orders`` topic, with a routing key
``orders.<region>.<kind>`` and attributes. The topic copies each one to the
queues whose subscription takes it:

- ``audit`` has no pattern and no filter: it takes every order;
- ``eu-shipping`` takes the keys ``orders.eu.#`` (AMQP topic rules: ``*`` is
  one word, ``#`` any number);
- ``big-orders`` takes orders whose ``amount`` attribute is 100 or more
  (an SNS-style filter policy).

Each queue is then drained by its own consumer, which would be a separate
service in real life; the counts printed show who saw what.
"""

from __future__ import annotations

import argparse
import contextlib
import random
from typing import Any

from dynamiq.client import Client
from dynamiq.errors import QueueExists, TopicExists
from dynamiq.models import Message, Outgoing

# queue: (routing-key pattern, attribute filter policy)
SUBSCRIPTIONS: dict[str, tuple[str | None, dict[str, Any] | None]] = {
    "audit": (None, None),
    "eu-shipping": ("orders.eu.#", None),
    "big-orders": (None, {"amount": {"numeric": [">=", 100]}}),
}


def order(n: int, rng: random.Random) -> Outgoing:
    region, kind = rng.choice(["eu", "us", "apac"]), rng.choice(["created", "cancelled"])
    return Outgoing(
        body=f"order {n}".encode(),
        routing_key=f"orders.{region}.{kind}",
        attributes={"amount": rng.randrange(1, 200), "region": region},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="node URLs (default $DYNAMIQ_HOSTS)")
    parser.add_argument("--orders", type=int, default=60, help="publish N orders")
    args = parser.parse_args()
    rng = random.Random(11)
    orders = [order(n, rng) for n in range(args.orders)]
    with Client(args.url) as client:
        with contextlib.suppress(TopicExists):
            client.create_topic("orders")
        for queue, (pattern, policy) in SUBSCRIPTIONS.items():
            with contextlib.suppress(QueueExists):
                client.create_queue(queue)
            client.subscribe("orders", queue, pattern=pattern, filter_policy=policy)
        for start in range(0, len(orders), 100):
            client.publish_topic("orders", orders[start : start + 100])

        seen: dict[str, int] = {}
        for queue in SUBSCRIPTIONS:

            def handle(message: Message, queue: str = queue) -> None:
                seen[queue] = seen.get(queue, 0) + 1  # ... the service's real work

            client.consume(queue, handle, idle_timeout=1.0)
    print(", ".join(f"{queue} {seen.get(queue, 0)}" for queue in SUBSCRIPTIONS))


if __name__ == "__main__":
    main()
