"""A transport that answers as Riak KV's HTTP API documents, for counting round trips.

It keeps objects, 2i pages and CRDT maps in memory and follows what
``riak_kv_wm_object`` and ``riak_kv_delete`` do with each request, so the
adapter's requests (and the reads Riak makes on their behalf) can be counted
where no Riak node runs. It is not a store anyone ships against.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from urllib.parse import unquote

from dynamiq.storage.riak import RiakRequest

Answer = tuple[int, dict[str, str], bytes]


class RiakModel:
    """Objects, their 2i keys and counters, with a count of requests and of Riak's own reads."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, int | str], tuple[bytes, str]] = {}  # value, vclock
        self.maps: dict[tuple[str, str], dict[str, object]] = {}
        self.requests: Counter[str] = Counter()
        self.reads = 0  # object reads Riak makes: GETs, conditional PUTs, DELETEs without vclock
        self._clocks = itertools.count(1)

    async def __call__(self, request: RiakRequest) -> Answer:
        parts = request.url.split("/")
        headers = {k.lower(): v for k, v in (request.headers or {}).items()}
        if "/datatypes/" in request.url:
            return self._map(request, unquote(parts[-3]), unquote(parts[-1]))
        bucket = unquote(parts[parts.index("buckets") + 1])
        if "/index/" in request.url:
            self.requests["index"] += 1
            return self._index(bucket, int(parts[-2]), int(parts[-1]), request.params or {})
        if "/types/maps/" in request.url:  # a counter's whole map deleted
            self.requests["map_delete"] += 1
            return 204, {}, b""
        raw = unquote(parts[-1])
        key: int | str = int(raw) if raw.isdigit() else raw  # a message's id, or a claim's key
        kind = request.method.lower()
        if request.method == "DELETE" and "x-riak-vclock" in headers:
            kind = "delete_with_vclock"
        self.requests[kind] += 1
        returnbody = (request.params or {}).get("returnbody") == "true"
        return self._object(request.method, bucket, key, request.data, headers, returnbody)

    def _object(
        self,
        method: str,
        bucket: str,
        key: int | str,
        data: bytes | None,
        headers: dict[str, str],
        returnbody: bool = False,
    ) -> Answer:
        held = self.objects.get((bucket, key))
        if method == "GET":
            self.reads += 1
            if held is None:
                return 404, {}, b"not found\n"
            return 200, {"x-riak-vclock": held[1]}, held[0]
        if method == "PUT":
            if "if-none-match" in headers:
                self.reads += 1  # resource_exists fetches the object first
                if held is not None:
                    return 412, {}, b""
            stored = self.objects[bucket, key] = (data or b"", f"vc{next(self._clocks)}")
            if returnbody:
                return 200, {"x-riak-vclock": stored[1]}, stored[0]
            return 204, {}, b""
        # DELETE: with a vclock Riak writes the tombstone at once and answers
        # 204 whatever it held; without one it reads the object first.
        if "x-riak-vclock" not in headers:
            self.reads += 1
            if held is None:
                return 404, {}, b""
        self.objects.pop((bucket, key), None)
        return 204, {}, b""

    def _index(self, bucket: str, lo: int, hi: int, params: dict[str, str]) -> Answer:
        after = int(params["continuation"]) if "continuation" in params else lo - 1
        keys = sorted(
            k
            for b, k in self.objects
            if b == bucket and isinstance(k, int) and after < k <= hi and k >= lo
        )
        page = keys[: int(params["max_results"])]
        body: dict[str, object] = {"keys": [str(k) for k in page]}
        if len(keys) > len(page):
            body["continuation"] = str(page[-1])
        return 200, {}, json.dumps(body).encode()

    def _map(self, request: RiakRequest, bucket: str, key: str) -> Answer:
        value = self.maps.setdefault((bucket, key), {})
        if request.method == "GET":
            self.requests["map_get"] += 1
            if not value:
                return 404, {}, b""
            return 200, {}, json.dumps({"value": value, "context": "ctx"}).encode()
        self.requests["map_update"] += 1
        operation = json.loads(request.data or b"{}")
        for field, change in operation.get("update", {}).items():
            if field.endswith("_counter"):
                value[field] = int(value.get(field, 0)) + change  # type: ignore[call-overload]
            else:
                value[field] = change
        for field in operation.get("remove", []):
            value.pop(field, None)
        return 204, {}, b""

    async def close(self) -> None:
        pass
