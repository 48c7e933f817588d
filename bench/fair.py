"""Fair queues: what one tenant's flood does to the others' dwell time, in one run.

    python -m bench.fair [--seconds 20] [--tenants 4] [--rate 25] [--flood 20]
                         [--consumers 8] [--batch 10] [--work-ms 5]

One node on LMDB, one standard queue, driven through the SQS endpoint's JSON
protocol (the calls boto3 makes, sent by a lean HTTP/1.1 client, so that on
a small machine the clients' own Python does not set the pace).
``--tenants`` quiet tenants each send ``--rate`` messages a second, one at a
time; ``--consumers`` consumers long-poll up to ``--batch``, spend ``--work-ms`` on
each message and delete the batch: they drain a fixed number a second, their
capacity. Three runs, each on a fresh node:

- ``quiet alone``: the quiet tenants, no flood;
- ``flood, no tenants``: besides them one tenant sends ``--flood`` times the
  quiet tenants' combined rate (in batches of 10, from another process),
  more than the consumers drain, and nobody names a ``MessageGroupId``: an
  ordinary queue, oldest first;
- ``flood, fair``: the same, each message's ``MessageGroupId`` its tenant's.

Reported per run: the quiet tenants' dwell time (sent to received) p50 and
p99, as multiples of the run without the flood; the flood's p50; and how
many quiet messages were sent and received (one never received counts as
waiting forever). Dwell times of messages sent in the first
``WARM_SECONDS`` are not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.floor import percentiles
from bench.http1 import Pool
from dynamiq.client import Client
from dynamiq.testing.cluster import LocalCluster

QUEUE = "fair"
BATCH = 10
WARM_SECONDS = 2.0
HEADERS = {"Content-Type": "application/x-amz-json-1.0"}


class Sqs:
    """SQS's JSON protocol over keep-alive connections (a node on loopback takes any
    caller: nothing to sign)."""

    def __init__(self, url: str) -> None:
        self._pool = Pool(url, HEADERS)
        self.queue_url = f"{url}/000000000000/{QUEUE}"

    async def call(self, action: str, **params: Any) -> dict[str, Any]:
        body = json.dumps({"QueueUrl": self.queue_url, **params}).encode()
        target = {"X-Amz-Target": f"AmazonSQS.{action}"}
        status, answer = await self._pool.request("POST", "/", body, target)
        if status != 200:
            raise RuntimeError(f"{action}: HTTP {status} {answer[:200]!r}")
        return dict(json.loads(answer))

    async def close(self) -> None:
        await self._pool.close()


@dataclass
class Seen:
    """What the consumers saw of a run."""

    start: float
    quiet: list[float] = field(default_factory=list)  # dwell seconds
    noisy: list[float] = field(default_factory=list)
    sent: int = 0  # quiet messages sent after the warm-up


async def _paced(rate: float, until: float, send: Any) -> None:
    step, due = 1.0 / rate, time.time()
    while due < until:
        await send()
        due += step
        await asyncio.sleep(max(0.0, due - time.time()))


def _flood(url: str, rate: float, until: float, tenants: bool) -> None:
    """Send ``rate`` messages a second in batches of 10 until ``until`` (in a process of
    its own, so that its sending does not slow the consumers' loop)."""
    group = {"MessageGroupId": "noisy"} if tenants else {}

    async def main() -> None:
        sqs = Sqs(url)

        async def send() -> None:
            body = f"noisy {time.time():.6f}"
            entries = [{"Id": str(i), "MessageBody": body, **group} for i in range(BATCH)]
            await sqs.call("SendMessageBatch", Entries=entries)

        senders = 4  # each paced at its share, so a slow answer does not slow the rest
        await asyncio.gather(*(_paced(rate / BATCH / senders, until, send) for _ in range(senders)))
        await sqs.close()

    asyncio.run(main())


async def _quiet(
    url: str, tenant: int, rate: float, until: float, tenants: bool, seen: Seen
) -> None:
    sqs = Sqs(url)
    group = {"MessageGroupId": f"quiet-{tenant}"} if tenants else {}

    async def send() -> None:
        now = time.time()
        await sqs.call("SendMessage", MessageBody=f"quiet {now:.6f}", **group)
        if now >= seen.start + WARM_SECONDS:
            seen.sent += 1

    await _paced(rate, until, send)
    await sqs.close()


async def _consume(url: str, batch: int, work_ms: float, until: float, seen: Seen) -> None:
    sqs = Sqs(url)
    while time.time() < until:
        got = (await sqs.call("ReceiveMessage", MaxNumberOfMessages=batch, WaitTimeSeconds=1)).get(
            "Messages", []
        )
        now = time.time()
        for m in got:
            who, sent = m["Body"].split()
            if float(sent) >= seen.start + WARM_SECONDS:
                (seen.quiet if who == "quiet" else seen.noisy).append(now - float(sent))
        if got:
            await asyncio.sleep(len(got) * work_ms / 1e3)  # the work each message asks
            entries = [
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)
            ]
            await sqs.call("DeleteMessageBatch", Entries=entries)
    await sqs.close()


async def _drive(url: str, args: argparse.Namespace, flood: bool, tenants: bool) -> Seen:
    seen = Seen(time.time())
    until = seen.start + args.seconds
    flooding = None
    if flood:
        rate = args.flood * args.tenants * args.rate
        flooding = multiprocessing.get_context("spawn").Process(
            target=_flood, args=(url, rate, until, tenants)
        )
        flooding.start()
    await asyncio.gather(
        *(_quiet(url, t, args.rate, until, tenants, seen) for t in range(args.tenants)),
        *(_consume(url, args.batch, args.work_ms, until, seen) for _ in range(args.consumers)),
    )
    if flooding is not None:
        flooding.join()
    return seen


def run(args: argparse.Namespace, flood: bool, tenants: bool) -> Seen:
    """One run on a fresh node."""
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(Path(tmp) / "node", nodes=1)
        cluster.start()
        try:
            url = cluster.nodes["n1"].url
            with Client(url) as admin:
                admin.create_queue(QUEUE)
            return asyncio.run(_drive(url, args, flood, tenants))
        finally:
            cluster.stop()


def _dwell(seen: Seen) -> dict[str, float]:
    """The quiet tenants' dwell percentiles (ms), one never received as forever."""
    return percentiles(seen.quiet + [float("inf")] * max(0, seen.sent - len(seen.quiet)))


def _ms(value: float) -> str:
    return "never" if value == float("inf") else f"{value:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--tenants", type=int, default=4, help="quiet tenants (default 4)")
    ap.add_argument("--rate", type=float, default=25.0, help="per quiet tenant, msg/s")
    ap.add_argument("--flood", type=float, default=20.0, help="x the quiet tenants' rate")
    ap.add_argument("--consumers", type=int, default=8)
    ap.add_argument("--work-ms", type=float, default=5.0, help="per message received")
    ap.add_argument("--batch", type=int, default=10, help="messages a receive asks (1-10)")
    args = ap.parse_args()
    runs = {
        "quiet alone": run(args, flood=False, tenants=True),
        "flood, no tenants": run(args, flood=True, tenants=False),
        "flood, fair": run(args, flood=True, tenants=True),
    }
    print(
        f"\n  {args.tenants} quiet tenants at {args.rate:g} msg/s each; the flood at "
        f"{args.flood:g}x their {args.tenants * args.rate:g} msg/s; {args.consumers} "
        f"consumers of {args.batch}, {args.work_ms:g} ms a message; {args.seconds:g} s a run"
    )
    heads = ("quiet p50 ms", "quiet p99 ms", "flood p50 ms", "quiet sent", "quiet recv")
    print(f"  {'':<20}" + "".join(f"{h:>14}" for h in heads))
    base = _dwell(runs["quiet alone"])
    for name, seen in runs.items():
        q = _dwell(seen)
        n = percentiles(seen.noisy)["p50"] if seen.noisy else float("nan")
        row = (_ms(q["p50"]), _ms(q["p99"]), _ms(n), str(seen.sent), str(len(seen.quiet)))
        print(f"  {name:<20}" + "".join(f"{v:>14}" for v in row))
        if name != "quiet alone":
            ratios = (q["p50"] / base["p50"], q["p99"] / base["p99"])
            print(f"  {'  / quiet alone':<20}" + "".join(f"{v:>14.2f}" for v in ratios))


if __name__ == "__main__":
    main()
