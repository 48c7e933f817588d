"""A producer that keeps publishing through an outage: what no node takes waits in a spool.

    make run                                            # a node on :8081 (another terminal)
    .venv/bin/python examples/producer.py --count 1000 --spool ./producer-spool

Each event carries a dedup id, so a publish sent again after a crash (taken
by a node, not yet marked sent in the spool) is stored once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

from dynamiq.client import Client
from dynamiq.errors import BackendUnavailable, QueueExists
from dynamiq.models import Outgoing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="node URLs (default $DYNAMIQ_HOSTS)")
    parser.add_argument("--queue", default="orders")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--spool", default="./producer-spool")
    parser.add_argument("--drain", type=float, default=30.0, help="seconds to wait for the spool")
    args = parser.parse_args()
    # The queue first (a producer may start while no node answers: then it exists
    # already, or the spooled publishes wait in the spool's "rejected" file).
    with Client(args.url) as admin, contextlib.suppress(QueueExists, BackendUnavailable):
        admin.create_queue(args.queue)
    with Client(args.url, spool=args.spool) as client:
        published = spooled = 0
        for start in range(0, args.count, 100):
            events = [
                Outgoing(json.dumps({"order": n}).encode(), dedup_id=f"order-{n}")
                for n in range(start, min(start + 100, args.count))
            ]
            answer = client.publish(args.queue, events)
            if answer.spooled:
                spooled += len(events)
            else:
                published += len(events)
        deadline = time.monotonic() + args.drain
        while client.spool_pending and time.monotonic() < deadline:
            time.sleep(0.1)
        left = "some still wait in the spool" if client.spool_pending else "the spool is empty"
        print(f"published {published}, spooled {spooled}; {left}")


if __name__ == "__main__":
    main()
