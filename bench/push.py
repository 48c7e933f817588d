"""Push delivery (webhooks): one node pushing a topic's messages to a local endpoint.

    python -m bench.push [--n 20000] [--rate 1000] [--seconds 10] [--raw] [--workers 1]

One node (embedded LMDB, fsync per group commit, one worker unless
``--workers`` says more: each delivers its own slice) and one
endpoint in a process of its own: an aiohttp server on loopback that answers
200 at once, keeps connections alive, confirms its subscription by fetching
``SubscribeURL`` as a real endpoint does, and notes when each notification
arrived. Two phases, one run:

- **throughput**: ``--n`` 1 KB messages published to the topic (v2 batches of
  100, two in flight) while the node pushes them; notifications per second
  from the first publish to the last arrival, and the node's CPU per
  notification (user + system over the phase, divided by the notifications);
- **latency**: ``--rate`` messages a second for ``--seconds`` (batches of 10
  every 10 ms); each body carries the time it was sent, the endpoint the
  time it arrived: publish-to-arrival p50 and p99.

Every notification is a signed SNS document (SignatureVersion 1, RSA-2048),
as a subscription without raw delivery gets it; with ``--raw``, the bare body
(nothing to sign).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.options import options
from bench.procs import cpu_seconds
from dynamiq.client import AsyncClient
from dynamiq.process.daemon import run as run_loop
from dynamiq.testing.cluster import LocalCluster

BODY_PAD = "x" * 1000
BATCH = 100


# -- the endpoint (a process of its own) ----------------------------------------------


class _Endpoint(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection to the endpoint: every request answered 200 at
    once (bodies by ``Content-Length``, as the node sends them). The endpoint is the
    bench's instrument, so it costs as little as an HTTP server can in Python: the
    figures are the node's, not a web framework's on the same two cores."""

    def __init__(self, arrivals: list[tuple[float, float]], counted: dict[str, int]) -> None:
        self._buffer = b""
        self._arrivals, self._counted = arrivals, counted
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while (end := self._buffer.find(b"\r\n\r\n")) >= 0:
            head = self._buffer[:end].decode("latin-1").split("\r\n")
            headers = dict(line.lower().split(": ", 1) for line in head[1:])
            size = int(headers.get("content-length", "0"))
            if len(self._buffer) < end + 4 + size:
                return  # the rest of the body is on its way
            body = self._buffer[end + 4 : end + 4 + size]
            self._buffer = self._buffer[end + 4 + size :]
            self._answer(head[0].split(" ")[1], headers, body)

    def _answer(self, path: str, headers: dict[str, str], body: bytes) -> None:
        answer = b""
        if path == "/hook":
            self._take(headers, body)
        elif path == "/stats":
            answer = json.dumps({**self._counted, "arrivals": self._arrivals}).encode()
        elif path == "/reset":
            self._arrivals.clear()
            self._counted["notifications"] = 0
        assert self._transport is not None
        self._transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(answer)}\r\n\r\n".encode()
            + answer
        )

    def _take(self, headers: dict[str, str], body: bytes) -> None:
        if headers.get("x-amz-sns-rawdelivery") == "true":
            message = body.decode()
        else:
            document = json.loads(body)
            if document["Type"] == "SubscriptionConfirmation":
                # Confirmed as a real endpoint does, from a thread of its own.
                threading.Thread(target=_get, args=(document["SubscribeURL"],)).start()
                return
            message = document["Message"]
        self._counted["notifications"] += 1
        # The bench's own bodies put "sent" first when they carry it: no parse needed.
        if message.startswith('{"sent"'):
            self._arrivals.append((json.loads(message)["sent"], time.time()))


def _get(url: str) -> None:
    with urllib.request.urlopen(url, timeout=30):
        pass


def serve_endpoint(port_file: str) -> None:
    """Run the endpoint until killed; write its port to ``port_file``."""
    arrivals: list[tuple[float, float]] = []  # (sent, arrived), wall seconds
    counted = {"notifications": 0}

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Endpoint(arrivals, counted), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        await asyncio.to_thread(Path(port_file).write_text, str(port))
        await asyncio.Event().wait()

    run_loop(main())


def _endpoint_stats(base: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base}/stats", timeout=30) as answer:
        stats: dict[str, Any] = json.loads(answer.read())
    return stats


def _reset(base: str) -> None:
    request = urllib.request.Request(f"{base}/reset", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=30):
        pass


async def _arrived(base: str, want: int, within: float = 300.0) -> float:
    """Wait until the endpoint counted ``want`` notifications; return when (monotonic)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if (await asyncio.to_thread(_endpoint_stats, base))["notifications"] >= want:
            return time.monotonic()
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the endpoint did not get {want} notifications in {within:.0f} s")


# -- the driver -------------------------------------------------------------------------


def _message(i: int, sent: float | None = None) -> dict[str, Any]:
    text: dict[str, Any] = {} if sent is None else {"sent": sent}
    text.update(i=i, pad=BODY_PAD)
    return {"body": json.dumps(text)}


async def _publish(client: AsyncClient, messages: list[dict[str, Any]]) -> None:
    await client._call("POST", "/v2/topics/bench/messages", {"messages": messages})


async def _throughput(
    client: AsyncClient, base: str, n: int, pid: int, endpoint_pid: int
) -> dict[str, float]:
    window = asyncio.Semaphore(2)

    async def batch(start: int) -> None:
        async with window:
            await _publish(client, [_message(i) for i in range(start, min(start + BATCH, n))])

    cpu, its, started = cpu_seconds(pid), cpu_seconds(endpoint_pid), time.monotonic()
    await asyncio.gather(*(batch(i) for i in range(0, n, BATCH)))
    published = time.monotonic()
    ended = await _arrived(base, n)
    used, its_used = cpu_seconds(pid) - cpu, cpu_seconds(endpoint_pid) - its
    return {
        "notifications_per_s": n / (ended - started),
        "publish_s": published - started,
        "cpu_us_per_notification": used / n * 1e6,
        "endpoint_cpu_us_per_notification": its_used / n * 1e6,
    }


async def _latency(client: AsyncClient, base: str, rate: int, seconds: float) -> dict[str, float]:
    _reset(base)
    per_tick, tick = max(1, rate // 100), 0.01
    ticks = int(seconds / tick)
    sent = 0
    started = time.monotonic()
    for k in range(ticks):
        await _publish(client, [_message(sent + j, time.time()) for j in range(per_tick)])
        sent += per_tick
        pause = started + (k + 1) * tick - time.monotonic()
        if pause > 0:
            await asyncio.sleep(pause)
    await _arrived(base, sent)
    waits = sorted((arrived - at) * 1000 for at, arrived in _endpoint_stats(base)["arrivals"])
    return {
        "sent": float(sent),
        "offered_per_s": sent / (time.monotonic() - started),
        "p50_ms": statistics.median(waits),
        "p99_ms": waits[int(len(waits) * 0.99) - 1],
    }


async def _run(
    url: str, endpoint: str, n: int, rate: int, seconds: float, pids: tuple[int, int], raw: bool
) -> None:
    async with AsyncClient(url, timeout=120) as client:
        await client.create_topic("bench")
        hook = await client.create_webhook("bench", f"{endpoint}/hook", raw=raw or None)
        for _ in range(200):
            hooks = await client.webhooks("bench")
            if hooks and hooks[0]["state"] == "confirmed":
                break
            await asyncio.sleep(0.05)
        else:
            raise RuntimeError(f"the endpoint did not confirm {hook['id']}")
        await _throughput(client, endpoint, 1000, *pids)  # warm-up: connections, caches
        _reset(endpoint)
        through = await _throughput(client, endpoint, n, *pids)
        latency = await _latency(client, endpoint, rate, seconds)
    kind = "raw bodies" if raw else "signed documents"
    print(f"throughput: {n} messages, one webhook ({kind})")
    print(f"  notifications/s            {through['notifications_per_s']:10,.0f}")
    print(f"  publish took               {through['publish_s']:10.2f} s")
    print(f"  node CPU per notification  {through['cpu_us_per_notification']:10.1f} us")
    print(f"  endpoint CPU per one       {through['endpoint_cpu_us_per_notification']:10.1f} us")
    print(f"latency at {rate}/s for {seconds:g} s ({latency['sent']:.0f} messages)")
    print(f"  offered                    {latency['offered_per_s']:10,.0f} /s")
    print(f"  publish to arrival p50     {latency['p50_ms']:10.2f} ms")
    print(f"  publish to arrival p99     {latency['p99_ms']:10.2f} ms")


def main() -> None:
    parser = options(__doc__, n=20_000, rate=1000, seconds=10.0)
    parser.add_argument("--raw", action="store_true", help="raw delivery (nothing signed)")
    parser.add_argument("--workers", type=int, default=1, help="the node's worker processes")
    parser.add_argument("--endpoint", metavar="PORT_FILE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.endpoint:
        serve_endpoint(args.endpoint)
        return
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        endpoint = subprocess.Popen(
            [sys.executable, "-m", "bench.push", "--endpoint", str(port_file)]
        )
        cluster = LocalCluster(Path(tmp) / "node", nodes=1, workers=args.workers)
        try:
            cluster.start()
            for _ in range(100):
                if port_file.exists() and port_file.read_text():
                    break
                time.sleep(0.05)
            base = f"http://127.0.0.1:{port_file.read_text()}"
            node = cluster.nodes["n1"]
            assert node.proc is not None
            pids = (node.proc.pid, endpoint.pid)
            run = _run(node.url, base, args.n, args.rate, args.seconds, pids, args.raw)
            asyncio.run(run)
        finally:
            cluster.stop()
            endpoint.terminate()
            endpoint.wait(10)


if __name__ == "__main__":
    main()
