"""An asyncio client for the v2 API."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import aiohttp
import msgspec

from dynamiq.errors import BackendUnavailable, error_for_code
from dynamiq.models import Message

__all__ = ["AsyncClient", "Body"]

Body = bytes | str
DEFAULT_URL = "http://127.0.0.1:8081"


def _wire(body: Body) -> dict[str, str]:
    if isinstance(body, str):
        return {"body": body}
    try:
        return {"body": body.decode()}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode(), "encoding": "base64"}


def _message(data: dict[str, Any]) -> Message:
    text: str = data["body"]
    raw = base64.b64decode(text) if data["encoding"] == "base64" else text.encode()
    return Message(int(data["id"]), raw, int(data["published_at"]))


class AsyncClient:
    """Talk to one Dynamiq node over its v2 API.

    Use as ``async with AsyncClient(url) as client:``. Every method raises the
    ``dynamiq.errors`` class named by the server's error code (for example
    ``QueueNotFound``), and ``BackendUnavailable`` when the node cannot be
    reached.
    """

    def __init__(self, url: str = DEFAULT_URL, *, timeout: float = 60.0) -> None:
        """Prepare a client.

        Args:
            url: the node's base URL, e.g. ``http://127.0.0.1:8081``.
            timeout: seconds allowed for one request (beyond any long-poll wait).
        """
        self.url = url.rstrip("/")
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection pool; idempotent."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- queues --------------------------------------------------------------

    async def create_queue(self, name: str, **settings: Any) -> dict[str, Any]:
        """Create a queue; settings as in ``QueueSettings``. Returns its description."""
        result: dict[str, Any] = await self._call("PUT", f"/v2/queues/{name}", settings)
        return result

    async def configure_queue(self, name: str, **changes: Any) -> dict[str, Any]:
        """Change some settings of a queue. Returns its description."""
        result: dict[str, Any] = await self._call("PATCH", f"/v2/queues/{name}", changes)
        return result

    async def queue(self, name: str) -> dict[str, Any]:
        """Return a queue's settings and stats."""
        result: dict[str, Any] = await self._call("GET", f"/v2/queues/{name}")
        return result

    async def queues(self) -> list[str]:
        """Return every queue name."""
        return list((await self._call("GET", "/v2/queues"))["queues"])

    async def delete_queue(self, name: str) -> None:
        """Delete a queue and its messages."""
        await self._call("DELETE", f"/v2/queues/{name}")

    # -- topics --------------------------------------------------------------

    async def create_topic(self, name: str) -> None:
        """Create a topic."""
        await self._call("PUT", f"/v2/topics/{name}")

    async def delete_topic(self, name: str) -> None:
        """Delete a topic (its queues stay)."""
        await self._call("DELETE", f"/v2/topics/{name}")

    async def topics(self) -> list[str]:
        """Return every topic name."""
        return list((await self._call("GET", "/v2/topics"))["topics"])

    async def subscribe(self, topic: str, queue: str) -> list[str]:
        """Subscribe a queue to a topic; return the subscribers."""
        path = f"/v2/topics/{topic}/subscriptions/{queue}"
        return list((await self._call("PUT", path))["queues"])

    async def unsubscribe(self, topic: str, queue: str) -> list[str]:
        """Unsubscribe a queue from a topic; return the remaining subscribers."""
        path = f"/v2/topics/{topic}/subscriptions/{queue}"
        return list((await self._call("DELETE", path))["queues"])

    # -- messages ------------------------------------------------------------

    async def publish(self, queue: str, bodies: Sequence[Body]) -> list[int]:
        """Publish messages durably; return their ids in order."""
        payload = {"messages": [_wire(b) for b in bodies]}
        result = await self._call("POST", f"/v2/queues/{queue}/messages", payload)
        return [int(i) for i in result["ids"]]

    async def publish_topic(self, topic: str, bodies: Sequence[Body]) -> dict[str, list[int]]:
        """Publish to every queue subscribed to ``topic``; return ids per queue."""
        payload = {"messages": [_wire(b) for b in bodies]}
        result = await self._call("POST", f"/v2/topics/{topic}/messages", payload)
        return {q: [int(i) for i in ids] for q, ids in result["ids"].items()}

    async def receive(
        self,
        queue: str,
        max_messages: int = 1,
        *,
        wait_seconds: float = 0.0,
        visibility_timeout: float | None = None,
    ) -> list[Message]:
        """Lease up to ``max_messages`` messages, waiting up to ``wait_seconds`` for one.

        Delete each message once processed; one that is not deleted is
        delivered again after its visibility timeout (at-least-once).
        """
        payload: dict[str, Any] = {"max_messages": max_messages, "wait_seconds": wait_seconds}
        if visibility_timeout is not None:
            payload["visibility_timeout"] = visibility_timeout
        result = await self._call(
            "POST", f"/v2/queues/{queue}/receive", payload, extra_time=wait_seconds
        )
        return [_message(m) for m in result["messages"]]

    async def delete(self, queue: str, ids: Sequence[int]) -> list[int]:
        """Delete messages by id; return the ids that existed."""
        payload = {"ids": [str(i) for i in ids]}
        result = await self._call("POST", f"/v2/queues/{queue}/delete", payload)
        return [int(i) for i in result["deleted"]]

    async def change_visibility(
        self, queue: str, ids: Sequence[int], visibility_timeout: float
    ) -> list[int]:
        """Keep leased messages invisible for ``visibility_timeout`` more seconds.

        With 0 the leases end and the messages are visible again at once.
        Returns the ids whose lease was live (and was changed).
        """
        payload = {"ids": [str(i) for i in ids], "visibility_timeout": visibility_timeout}
        result = await self._call("POST", f"/v2/queues/{queue}/visibility", payload)
        return [int(i) for i in result["changed"]]

    async def peek(self, queue: str, message_id: int) -> Message:
        """Read a message without leasing it."""
        result = await self._call("GET", f"/v2/queues/{queue}/messages/{message_id}")
        return _message(result["message"])

    # -- transport -----------------------------------------------------------

    async def _call(
        self, method: str, path: str, payload: Any = None, extra_time: float = 0.0
    ) -> Any:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        data = msgspec.json.encode(payload) if payload is not None else None
        timeout = aiohttp.ClientTimeout(total=self._timeout + extra_time)
        headers = {"Content-Type": "application/json"} if data is not None else None
        try:
            async with self._session.request(
                method, self.url + path, data=data, headers=headers, timeout=timeout
            ) as response:
                raw = await response.read()
                status = response.status
                retry_after = response.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise BackendUnavailable(f"cannot reach {self.url}: {exc!r}") from exc
        body = msgspec.json.decode(raw) if raw else None
        if status >= 400:
            _raise(status, body, retry_after)
        return body


def _raise(status: int, body: Any, retry_after: str | None) -> None:
    if isinstance(body, dict) and "error" in body:
        err = error_for_code(str(body["error"]), str(body.get("message", "")), status)
    else:
        err = error_for_code("HTTP_ERROR", f"HTTP {status}", status)
    if isinstance(err, BackendUnavailable):
        err.retry_after = int(retry_after) if retry_after and retry_after.isdigit() else 1
    raise err
