"""A worker with retries and a dead-letter queue: what keeps failing is set aside.

    make run                                            # a node on :8081 (another terminal)
    .venv/bin/python examples/worker.py --seed 100

Messages whose body starts with "poison" fail every time: after three
receives they are in ``orders-dead``, where ``dynamiq redrive orders-dead``
sends them back once the bug is fixed. The others are handled once each.
"""

from __future__ import annotations

import argparse
import contextlib

from dynamiq.client import Client
from dynamiq.errors import QueueExists
from dynamiq.models import Message


def handle(message: Message) -> None:
    if message.body.startswith(b"poison"):
        raise ValueError(f"cannot handle {message.body!r}")
    # ... the real work; returning means done, and the message is deleted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="node URLs (default $DYNAMIQ_HOSTS)")
    parser.add_argument("--seed", type=int, default=0, help="publish N messages (1 in 10 poison)")
    args = parser.parse_args()
    with Client(args.url) as client:
        for name, settings in (
            ("orders-dead", {}),
            ("orders", {"max_receives": 3, "dead_letter_queue": "orders-dead"}),
        ):
            with contextlib.suppress(QueueExists):
                client.create_queue(name, **settings)
        bodies = [f"poison {n}" if n % 10 == 0 else f"order {n}" for n in range(args.seed)]
        for start in range(0, len(bodies), 100):
            client.publish("orders", bodies[start : start + 100])
        # Until Ctrl-C, or until the queue stays empty for two seconds.
        report = client.consume("orders", handle, concurrency=4, idle_timeout=2.0)
        dead = client.queue("orders-dead")["stats"]["depth"]
        print(f"handled {report.succeeded}, failed {report.failed} times; {dead} dead-lettered")


if __name__ == "__main__":
    main()
