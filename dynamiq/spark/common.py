"""What the Spark side shares: options, the cluster's nodes, messages as rows."""

from __future__ import annotations

import datetime as dt
import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from dynamiq.client.transport import tls_context
from dynamiq.models import Message

__all__ = ["SCHEMA", "Options", "live_nodes", "node_urls", "row_of"]

# One row per message. ``text`` is the body decoded as UTF-8, null when it is not.
SCHEMA = "id LONG, body BINARY, text STRING, queue STRING, published_at TIMESTAMP"


def node_urls(url: str | Sequence[str] | None) -> list[str]:
    """Return node URLs from a comma list or a list, else from ``DYNAMIQ_HOSTS``.

    Raises:
        ValueError: none given anywhere.
    """
    raw = url if isinstance(url, str) else ",".join(url or ())
    raw = raw or os.environ.get("DYNAMIQ_HOSTS", "")
    urls = [u.strip().rstrip("/") for u in raw.split(",") if u.strip()]
    if not urls:
        raise ValueError("dynamiq: set option 'url' (one or more node URLs) or DYNAMIQ_HOSTS")
    return urls


class Options:
    """The options of a read or write, validated once with clear messages."""

    def __init__(self, options: Mapping[str, str]) -> None:
        lowered = {k.lower(): v for k, v in options.items()}
        self.urls = node_urls(lowered.get("url"))
        self.queue = lowered.get("queue", "")
        self.topic = lowered.get("topic", "")
        self.max_messages = _positive(lowered, "maxmessages", 1000)
        self.per_batch = _positive(lowered, "maxmessagesperbatch", 1000)
        self.batch_size = _positive(lowered, "batchsize", 100)
        self.visibility = float(lowered.get("visibilitytimeout", "60"))
        self.wait = float(lowered.get("waitseconds", "1"))
        self.delete = lowered.get("deleteonread", "false").lower() == "true"
        self.tasks_per_node = _positive(lowered, "taskspernode", 2)
        # What every client of this read or write is made with (``Client(urls, **client)``):
        # the application key and the certificate authorities for https:// nodes.
        self.client: dict[str, Any] = {"key": lowered.get("key"), "ca_file": lowered.get("cafile")}
        if self.visibility <= 0 or self.wait < 0:
            raise ValueError("dynamiq: visibilityTimeout must be > 0 and waitSeconds >= 0")

    def need_queue(self) -> str:
        """Return the queue option, or say it is missing."""
        if not self.queue:
            raise ValueError("dynamiq: set option 'queue'")
        return self.queue


def _positive(options: Mapping[str, str], key: str, default: int) -> int:
    value = options.get(key, str(default))
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"dynamiq: option {key!r} must be a positive integer, not {value!r}")
    return int(value)


def live_nodes(urls: list[str], key: str | None = None, ca_file: str | None = None) -> list[str]:
    """Return the HTTP URLs of the cluster's live members (asked of the first node that answers).

    Falls back to ``urls`` for nodes that cannot say (an older node, or all unreachable).
    ``key`` and ``ca_file`` as for the client (defaults ``DYNAMIQ_KEY``, ``DYNAMIQ_CA_FILE``).
    """
    key = os.environ.get("DYNAMIQ_KEY") if key is None else key
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    tls = tls_context(ca_file) if any(u.startswith("https:") for u in urls) else None
    for url in urls:
        request = urllib.request.Request(f"{url}/v2/status", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10, context=tls) as r:
                status: dict[str, Any] = json.load(r)
        except (OSError, urllib.error.URLError, ValueError):
            continue
        nodes = [m["http"] for m in status.get("members", []) if m.get("slice")]
        if nodes:
            return sorted(nodes)
    return list(urls)


def row_of(queue: str, message: Message) -> tuple[Any, ...]:
    """Return a message as a row of ``SCHEMA``."""
    try:
        text: str | None = message.body.decode()
    except UnicodeDecodeError:
        text = None
    published = dt.datetime.fromtimestamp(message.published_ms / 1000, tz=dt.UTC)
    return (message.id, message.body, text, queue, published)
