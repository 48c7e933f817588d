"""The v2 API's verbs beyond a queue's: topics, their subscriptions and webhooks, the
cluster's stats and status, and keys, as ``AsyncClient`` offers them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

__all__ = ["Administration"]


class Administration:
    """What ``AsyncClient`` offers beside queues and messages (its ``_call`` sends a
    request to the nodes and returns the answer's JSON)."""

    _call: Callable[..., Awaitable[Any]]

    async def _names(self, path: str, field: str, prefix: str, page_size: int) -> list[str]:
        query: dict[str, str | int] = {"limit": page_size}
        if prefix:
            query["prefix"] = prefix
        return await self._pages(path, field, query)

    async def _pages(self, path: str, field: str, query: dict[str, str | int]) -> list[Any]:
        """``field`` of every page of a listing, each asked for after the last (``next``)."""
        found: list[Any] = []
        while True:
            page = await self._call("GET", f"{path}?{urlencode(query)}")
            found += page[field]
            if not page.get("next"):
                return found
            query["after"] = page["next"]

    # -- topics --------------------------------------------------------------

    async def create_topic(self, name: str) -> None:
        """Create a topic."""
        await self._call("PUT", f"/v2/topics/{name}")

    async def delete_topic(self, name: str) -> None:
        """Delete a topic (its queues stay)."""
        await self._call("DELETE", f"/v2/topics/{name}")

    async def topics(self, prefix: str = "", page_size: int = 1000) -> list[str]:
        """Return every topic name (starting with ``prefix``), ``page_size`` a request."""
        return await self._names("/v2/topics", "topics", prefix, page_size)

    async def subscribe(
        self,
        topic: str,
        queue: str,
        *,
        pattern: str | None = None,
        filter_policy: dict[str, Any] | None = None,
        filter_scope: str | None = None,
    ) -> list[str]:
        """Subscribe a queue to a topic, or change what it takes: the messages whose
        routing key fits ``pattern`` (``*`` one word, ``#`` any) and whose
        attributes (or JSON body, with ``filter_scope`` "body") pass
        ``filter_policy`` (everything without them). Returns the subscribed
        queues (of a topic of more than 1,000, the first 1,000: ``subscriptions``
        reads them all)."""
        path = f"/v2/topics/{topic}/subscriptions/{queue}"
        given = (("pattern", pattern), ("filter", filter_policy), ("filter_scope", filter_scope))
        body = {k: v for k, v in given if v is not None}
        return list((await self._call("PUT", path, body or None))["queues"])

    async def subscriptions(self, topic: str, page_size: int = 1000) -> list[dict[str, Any]]:
        """Return a topic's subscriptions, each with its pattern and filter if set,
        ``page_size`` a request."""
        return await self._pages(f"/v2/topics/{topic}", "subscriptions", {"limit": page_size})

    async def webhooks(self, topic: str) -> list[dict[str, Any]]:
        """Return a topic's webhooks: id, url, state, counts and what each takes."""
        return list((await self._call("GET", f"/v2/topics/{topic}/webhooks"))["webhooks"])

    async def create_webhook(self, topic: str, url: str, /, **options: Any) -> dict[str, Any]:
        """Push a topic's messages to ``url`` (``filter``, ``filter_scope``, ``raw``,
        ``delivery_policy``, ``dead_letter_queue`` as v2 takes them); return the webhook,
        pending until its endpoint confirms."""
        body = {"url": url, **{k: v for k, v in options.items() if v is not None}}
        return dict(await self._call("POST", f"/v2/topics/{topic}/webhooks", body))

    async def delete_webhook(self, topic: str, webhook: str) -> None:
        """Stop a webhook (what it had still to deliver is dropped)."""
        await self._call("DELETE", f"/v2/topics/{topic}/webhooks/{webhook}")

    async def rotate_signing_key(self) -> dict[str, Any]:
        """Make the cluster a new key to sign pushes with (administrators); return its
        ``key_id`` and ``certificate_url``."""
        return dict(await self._call("POST", "/v2/signing-key"))

    async def unsubscribe(self, topic: str, queue: str) -> list[str]:
        """Unsubscribe a queue from a topic; return the remaining subscribers (the first
        1,000, as ``subscribe``)."""
        path = f"/v2/topics/{topic}/subscriptions/{queue}"
        return list((await self._call("DELETE", path))["queues"])

    # -- the cluster ---------------------------------------------------------

    async def stats(self, prefix: str = "", page_size: int = 100) -> dict[str, Any]:
        """Return every queue's stats (depth, in flight, rates, ...) and their sums, read
        ``page_size`` queues a request."""
        pages = [await self.stats_page(page_size, prefix=prefix)]
        while pages[-1].get("next"):
            pages.append(await self.stats_page(page_size, pages[-1]["next"], prefix))
        result = dict(pages[-1])
        result["queues"] = [q for page in pages for q in page["queues"]]
        if pages[-1]["totals"].get("scope") != "all":  # each page summed its own queues
            result["totals"] = _summed([page["totals"] for page in pages])
        return result

    async def stats_page(
        self, limit: int = 100, after: str = "", prefix: str = ""
    ) -> dict[str, Any]:
        """Return one page of queues' stats (by name) and their sums; ``next`` names the
        queue the next page starts after (absent on the last)."""
        query: dict[str, str | int] = {"limit": limit}
        if after:
            query["after"] = after
        if prefix:
            query["prefix"] = prefix
        result: dict[str, Any] = await self._call("GET", f"/v2/stats?{urlencode(query)}")
        return result

    async def status(self) -> dict[str, Any]:
        """Return the node asked, the members it sees with their slices, what it serves."""
        result: dict[str, Any] = await self._call("GET", "/v2/status")
        return result

    # -- keys (an administrator's) -------------------------------------------

    async def create_key(
        self,
        application: str,
        role: str,
        *,
        description: str = "",
        requests_per_second: float | None = None,
        aws: bool = False,
    ) -> dict[str, Any]:
        """Make an application key; ``key`` in the answer is shown this once, and so is
        ``secret_access_key`` (with ``aws``: an AWS credential, for SigV4)."""
        body: dict[str, Any] = {"application": application, "role": role}
        if aws:
            body["aws"] = True
        if description:
            body["description"] = description
        if requests_per_second is not None:
            body["requests_per_second"] = requests_per_second
        result: dict[str, Any] = await self._call("POST", "/v2/keys", body)
        return result

    async def keys(self) -> list[dict[str, Any]]:
        """Return every key (never their secrets)."""
        return list((await self._call("GET", "/v2/keys"))["keys"])

    async def revoke_key(self, key_id: str) -> None:
        """Revoke a key on every node."""
        await self._call("DELETE", f"/v2/keys/{key_id}")

    async def rotate_sealing_key(self) -> dict[str, Any]:
        """Seal every AWS credential's secret under a new cluster key; return its
        ``key_id``."""
        return dict(await self._call("POST", "/v2/sealing-key"))


def _summed(totals: list[dict[str, Any]]) -> dict[str, Any]:
    """Pages' totals added up (numbers, and the numbers of nested objects)."""
    out: dict[str, Any] = {}
    for page in totals:
        for key, value in page.items():
            if isinstance(value, dict):
                out[key] = _summed([out.get(key, {}), value])
            elif isinstance(value, str):  # what the sums are over
                out[key] = value
            else:
                out[key] = out.get(key, 0) + value
    return out
