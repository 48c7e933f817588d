"""W1's shape through the SQS endpoint (boto3) beside the v2 API, in one run; and the
SQS endpoint with SigV4 verified (``auth.sqs = sigv4``, a key's AWS credential) beside
it served open (``auth.sqs = open``): what checking every signature costs the server.

    python -m bench.sqs [--messages 50000] [--size 1024] [--concurrency 8] [--rate R]

For each path, on a fresh one-node cluster (embedded LMDB): ``--concurrency``
threads publish ``--messages`` bodies of ``--size`` bytes in batches of 10
(v2: ``POST /v2/queues/Q/messages``; SQS: ``SendMessageBatch``), then the
same threads receive 10 at a time and delete each batch (v2: receive and
``DELETE`` by ids; SQS: ``ReceiveMessage`` of 10 and ``DeleteMessageBatch``)
until every message was deleted. Reported per phase: messages per second
(wall) and the node's CPU per message (its user and system time from
``/proc``), which is what the SQS path costs the server beyond v2; the
clients share the machine, and boto3's own CPU per call bounds its rates.
A node's CPU per message falls as its load rises (a commit and a wake-up
serve more messages), so ``--rate`` offers both paths the same load: batches
are started at most that many messages per second.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.procs import cpu_seconds
from dynamiq.client import Client
from dynamiq.testing.cluster import LocalCluster

QUEUE = "bench"
BATCH = 10
ADMIN_KEY = "bench-administrators-key-0123456789abcdefgh"
KEYED = ("--auth-enabled", "true")  # the administrator's key in the environment (KEY_ENV)
KEY_ENV = {"DYNAMIQ_AUTH_ADMINKEY": ADMIN_KEY}


Way = tuple[Callable[[list[bytes]], None], Callable[[], int], Callable[[], None]]


def _v2(url: str, _: dict[str, str]) -> Way:
    client = Client(url)

    def publish(bodies: list[bytes]) -> None:
        client.publish(QUEUE, bodies)

    def consume() -> int:
        got = client.receive(QUEUE, BATCH, wait_seconds=1.0)
        if got:
            client.delete(QUEUE, [m.id for m in got])
        return len(got)

    return publish, consume, client.close


def _boto3(url: str, credential: dict[str, str]) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=credential.get("access_key_id", "key"),
        aws_secret_access_key=credential.get("secret_access_key", "secret"),
        config=Config(max_pool_connections=64),
    )


def _sqs(url: str, credential: dict[str, str]) -> Way:
    sqs = _boto3(url, credential)
    queue_url = credential.get("queue_url", f"{url}/000000000000/{QUEUE}")

    def publish(bodies: list[bytes]) -> None:
        entries = [{"Id": str(i), "MessageBody": b.decode()} for i, b in enumerate(bodies)]
        answer = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
        if answer.get("Failed"):
            sys.exit(f"bench.sqs: a send failed: {answer['Failed'][0]}")

    def consume() -> int:
        got = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=BATCH, WaitTimeSeconds=1
        ).get("Messages", [])
        if got:
            entries = [
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)
            ]
            sqs.delete_message_batch(QueueUrl=queue_url, Entries=entries)
        return len(got)

    return publish, consume, sqs.close


def _open_queue(url: str) -> dict[str, str]:
    with Client(url, key=ADMIN_KEY) as admin:  # a node without keys takes it too
        admin.create_queue(QUEUE)
    return {}


def _signed_queue(url: str) -> dict[str, str]:
    """A key of the application ``bench`` with an AWS credential, and its queue."""
    with Client(url, key=ADMIN_KEY) as admin:
        made = admin.create_key("bench", "produce-consume", aws=True)
    credential = {k: made[k] for k in ("access_key_id", "secret_access_key")}
    with Client(url, key=ADMIN_KEY) as admin:
        admin.create_queue(f"bench:{QUEUE}")
    sqs = _boto3(url, credential)
    credential["queue_url"] = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
    sqs.close()
    return credential


# A path: how its node starts (flags) and its queue is made, and per client thread how
# it publishes a batch, consumes one, and closes.
PATHS: dict[str, tuple[tuple[str, ...], Callable[[str], dict[str, str]], Callable[..., Way]]] = {
    "v2": ((), _open_queue, _v2),
    "sqs": ((), _open_queue, _sqs),
    "sqs-open": ((*KEYED, "--auth-sqs", "open"), _open_queue, _sqs),
    "sqs-sigv4": (KEYED, _signed_queue, _sqs),
}


class Pace:
    """Hands out start times ``BATCH / rate`` seconds apart (no pacing without a rate)."""

    def __init__(self, rate: float | None) -> None:
        self._step = BATCH / rate if rate else 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    def wait(self) -> None:
        if not self._step:
            return
        with self._lock:
            now = time.perf_counter()
            slot = self._next = max(now, self._next) + self._step
        time.sleep(max(0.0, slot - self._step - now))


def run_path(
    name: str, messages: int, size: int, threads: int, rate: float | None
) -> dict[str, float]:
    """Publish then consume ``messages`` through one path on a fresh node."""
    flags, make_queue, way = PATHS[name]
    with tempfile.TemporaryDirectory() as tmp:
        env = KEY_ENV if flags else None
        cluster = LocalCluster(Path(tmp) / "node", nodes=1, extra=flags, env=env)
        cluster.start()
        try:
            node = cluster.nodes["n1"]
            assert node.proc is not None
            credential = make_queue(node.url)
            workers = [way(node.url, credential) for _ in range(threads)]
            pad = b"x" * (size - 10)
            batches = [
                [b"%010d" % n + pad for n in range(start, min(messages, start + BATCH))]
                for start in range(0, messages, BATCH)
            ]
            lock, pace = threading.Lock(), Pace(rate)

            def publisher(publish: Callable[[list[bytes]], None]) -> None:
                while True:
                    with lock:
                        if not batches:
                            return
                        batch = batches.pop()
                    pace.wait()
                    publish(batch)

            left = [messages]

            def consumer(consume: Callable[[], int]) -> None:
                while True:
                    with lock:
                        if left[0] <= 0:
                            return
                    pace.wait()
                    got = consume()
                    with lock:
                        left[0] -= got

            pid = node.proc.pid
            pub_s, pub_cpu = _phase(pid, [functools.partial(publisher, w[0]) for w in workers])
            cons_s, cons_cpu = _phase(pid, [functools.partial(consumer, w[1]) for w in workers])
            for _, _, close in workers:
                close()
        finally:
            cluster.stop()
    return {
        "pub": messages / pub_s,
        "cons": messages / cons_s,
        "pub_us": pub_cpu / messages * 1e6,
        "cons_us": cons_cpu / messages * 1e6,
    }


def _phase(pid: int, jobs: list[Callable[[], None]]) -> tuple[float, float]:
    """Run ``jobs`` in threads; wall seconds, and the node's CPU seconds meanwhile."""
    threads = [threading.Thread(target=job) for job in jobs]
    cpu, started = cpu_seconds(pid), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started, cpu_seconds(pid) - cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=1024, help="bytes per body (default 1024)")
    ap.add_argument("--concurrency", type=int, default=8, help="client threads (default 8)")
    ap.add_argument("--rate", type=float, help="messages per second offered (default: no limit)")
    args = ap.parse_args()
    results = {
        name: run_path(name, args.messages, args.size, args.concurrency, args.rate)
        for name in PATHS
    }
    offered = f", at most {args.rate:,.0f} msg/s" if args.rate else ""
    print(f"\n  {args.messages:,} messages of {args.size} B, {args.concurrency} threads{offered}")
    heads = ("pub msg/s", "cons msg/s", "pub µs/msg", "cons µs/msg", "total µs")
    print(f"  {'':<20}" + "".join(f"{h:>13}" for h in heads))
    for name, r in results.items():
        row = (r["pub"], r["cons"], r["pub_us"], r["cons_us"], r["pub_us"] + r["cons_us"])
        print(f"  {name:<20}" + "".join(f"{v:>13,.1f}" for v in row))
    for over, under in (("sqs", "v2"), ("sqs-sigv4", "sqs-open")):
        print(
            f"  {over + ' / ' + under:<20}"
            + "".join(f"{v:>13.2f}" for v in _ratios(results[over], results[under]))
        )
    print("  (µs/msg: the node's CPU per message, user + system, from /proc)")


def _ratios(over: dict[str, float], under: dict[str, float]) -> tuple[float, ...]:
    return (
        over["pub"] / under["pub"],
        over["cons"] / under["cons"],
        over["pub_us"] / under["pub_us"],
        over["cons_us"] / under["cons_us"],
        (over["pub_us"] + over["cons_us"]) / (under["pub_us"] + under["cons_us"]),
    )


if __name__ == "__main__":
    main()
