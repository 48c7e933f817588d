"""Redis / Valkey store (standalone), on redis-py's asyncio client.

Layout: the id keyspace is cut into ``2^SHARD_BITS`` shards by the top bits of
the id; each (bucket, shard) pair is a hash of records and a sorted set of
fixed-width hex ids (all scores 0, so ``ZRANGEBYLEX`` walks them in id
order). Both keys share the hash tag ``{<bucket>:<shard>}``: a multi-step
change of one shard is one Lua script, and in Cluster mode a queue's shards
spread over the cluster's nodes. Configuration lives in one hash.

Durability follows the server: run it with ``appendonly yes`` and
``appendfsync always`` for an fsync before every acknowledgement;
``waitreplicas`` adds a ``WAIT`` for that many replicas after each write.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

from dynamiq.errors import BackendUnavailable
from dynamiq.storage.base import KeyRange

try:
    import redis.asyncio as aioredis
    from redis.exceptions import RedisError
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("the Redis store needs redis-py: pip install 'dynamiq[redis]'") from exc

__all__ = ["RedisBackend"]

T = TypeVar("T")
SHARD_BITS = 8
SHARD_SHIFT = 63 - SHARD_BITS
META = "dq:meta"
WAIT_MS = 5000
SOCKET_TIMEOUT = 5.0  # a server that stops answering fails requests (503), not hangs them

_INSERT = """
local out = {}
for i = 1, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then
    redis.call('ZADD', KEYS[2], 0, ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
"""

_DELETE = """
local out = {}
for i = 1, #ARGV do
  local gone = redis.call('HDEL', KEYS[1], ARGV[i])
  if gone == 1 then redis.call('ZREM', KEYS[2], ARGV[i]) end
  out[#out + 1] = gone
end
return out
"""


def _member(key: int) -> str:
    return f"{key:016x}"


def _keys(bucket: str, shard: int) -> tuple[str, str]:
    tag = f"{{{bucket}:{shard}}}"
    return f"dq:{tag}:h", f"dq:{tag}:z"


class RedisBackend:
    """``StorageBackend`` on one Redis or Valkey server."""

    def __init__(self, url: str, wait_replicas: int = 0, pool_size: int = 16) -> None:
        # A blocking pool: requests beyond the pool wait for a connection
        # instead of failing at once.
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=pool_size,
            timeout=10,
            socket_timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=SOCKET_TIMEOUT,
        )
        self._redis = aioredis.Redis(connection_pool=pool)
        self._insert = self._redis.register_script(_INSERT)
        self._delete = self._redis.register_script(_DELETE)
        self._wait_replicas = wait_replicas
        self._commits = 0
        self._commit_seconds = 0.0

    async def _call(self, work: Callable[[], Awaitable[T]]) -> T:
        try:
            return await work()
        except (RedisError, OSError) as exc:
            raise BackendUnavailable(f"Redis: {exc}") from exc

    async def _write(self, commands: Callable[[Any], Awaitable[None]]) -> list[Any]:
        """Run ``commands`` in one pipeline on one connection, then WAIT on that connection.

        WAIT covers only the writes of its own connection, so the writes and
        the WAIT must travel together.
        """
        pipe = self._redis.pipeline(transaction=False)
        await commands(pipe)
        if self._wait_replicas:
            pipe.wait(self._wait_replicas, WAIT_MS)
        results: list[Any] = await pipe.execute()
        if self._wait_replicas:
            acked = results.pop()
            if acked < self._wait_replicas:
                raise BackendUnavailable(f"only {acked} replicas acknowledged the write")
        return results

    # -- messages ------------------------------------------------------------

    async def insert(self, items: Sequence[tuple[str, int, bytes]]) -> list[bool]:
        """Create objects, never overwriting; per item, whether it was stored."""
        groups: dict[tuple[str, int], list[int]] = defaultdict(list)
        for index, (bucket, key, _) in enumerate(items):
            groups[bucket, key >> SHARD_SHIFT].append(index)
        out = [False] * len(items)

        async def commands(pipe: Any) -> None:
            for (bucket, shard), idx in groups.items():
                args = [v for i in idx for v in (_member(items[i][1]), items[i][2])]
                await self._insert(keys=list(_keys(bucket, shard)), args=args, client=pipe)

        async def work() -> None:
            loop = asyncio.get_running_loop()
            started = loop.time()
            results = await self._write(commands)
            for idx, flags in zip(groups.values(), results, strict=True):
                for i, flag in zip(idx, flags, strict=True):
                    out[i] = bool(flag)
            self._commits += 1
            self._commit_seconds += loop.time() - started

        await self._call(work)
        return out

    async def get(self, bucket: str, keys: Sequence[int]) -> list[bytes | None]:
        """Return the value of each key, None where absent."""
        groups: dict[int, list[int]] = defaultdict(list)
        for index, key in enumerate(keys):
            groups[key >> SHARD_SHIFT].append(index)
        out: list[bytes | None] = [None] * len(keys)

        async def work() -> None:
            pipe = self._redis.pipeline(transaction=False)
            for shard, idx in groups.items():
                pipe.hmget(_keys(bucket, shard)[0], [_member(keys[i]) for i in idx])
            for idx, values in zip(groups.values(), await pipe.execute(), strict=True):
                for i, value in zip(idx, values, strict=True):
                    out[i] = value

        await self._call(work)
        return out

    async def delete(self, bucket: str, keys: Sequence[int]) -> list[bool]:
        """Delete keys; per key, whether it existed."""
        groups: dict[int, list[int]] = defaultdict(list)
        for index, key in enumerate(keys):
            groups[key >> SHARD_SHIFT].append(index)
        out = [False] * len(keys)

        async def commands(pipe: Any) -> None:
            for shard, idx in groups.items():
                args = [_member(keys[i]) for i in idx]
                await self._delete(keys=list(_keys(bucket, shard)), args=args, client=pipe)

        async def work() -> None:
            results = await self._write(commands)
            for idx, flags in zip(groups.values(), results, strict=True):
                for i, flag in zip(idx, flags, strict=True):
                    out[i] = bool(flag)

        await self._call(work)
        return out

    async def scan(
        self, bucket: str, ranges: Sequence[KeyRange], limit: int | Sequence[int]
    ) -> list[list[int]]:
        """Return, per inclusive range, its first keys in ascending order."""
        limits = [limit] * len(ranges) if isinstance(limit, int) else list(limit)
        return await self._call(lambda: self._scan(bucket, ranges, limits))

    async def _scan(
        self, bucket: str, ranges: Sequence[KeyRange], limits: list[int]
    ) -> list[list[int]]:
        # One ZRANGEBYLEX per shard a range touches, all in one round trip; a
        # range over several shards is cut to its limit afterwards.
        pipe = self._redis.pipeline(transaction=False)
        spans: list[int] = []
        for (lo, hi), n in zip(ranges, limits, strict=True):
            shards = range(lo >> SHARD_SHIFT, (hi >> SHARD_SHIFT) + 1) if n > 0 else range(0)
            for shard in shards:
                pipe.zrangebylex(
                    _keys(bucket, shard)[1], f"[{_member(lo)}", f"[{_member(hi)}", start=0, num=n
                )
            spans.append(len(shards))
        found = iter(await pipe.execute())
        out: list[list[int]] = []
        for span, n in zip(spans, limits, strict=True):
            keys = [int(m, 16) for _ in range(span) for m in next(found)]
            out.append(keys[:n])
        return out

    async def count(self, bucket: str) -> int:
        """Return how many objects the bucket holds."""

        async def work() -> int:
            pipe = self._redis.pipeline(transaction=False)
            for shard in range(1 << SHARD_BITS):
                pipe.hlen(_keys(bucket, shard)[0])
            return sum(await pipe.execute())

        return await self._call(work)

    async def drop(self, bucket: str) -> None:
        """Delete every object of a bucket."""

        async def work() -> None:
            pipe = self._redis.pipeline(transaction=False)
            for shard in range(1 << SHARD_BITS):
                pipe.unlink(*_keys(bucket, shard))
            await pipe.execute()

        await self._call(work)

    # -- configuration -------------------------------------------------------

    async def meta_get(self, key: str) -> bytes | None:
        """Return a configuration value, None if absent."""

        async def work() -> bytes | None:
            return cast("bytes | None", await self._redis.hget(META, key))

        return await self._call(work)

    async def meta_scan(self, prefix: str) -> dict[str, bytes]:
        """Return every configuration entry whose key starts with ``prefix``."""

        async def work() -> dict[bytes, bytes]:
            return cast("dict[bytes, bytes]", await self._redis.hgetall(META))

        found = {k.decode(): v for k, v in (await self._call(work)).items()}
        return {k: v for k, v in sorted(found.items()) if k.startswith(prefix)}

    async def meta_create(self, key: str, value: bytes) -> bool:
        """Store a configuration value only if the key is absent."""

        async def commands(pipe: Any) -> None:
            pipe.hsetnx(META, key, value)

        async def work() -> bool:
            return bool((await self._write(commands))[0])

        return await self._call(work)

    async def meta_put(self, entries: dict[str, bytes]) -> None:
        """Store configuration values, overwriting."""

        async def commands(pipe: Any) -> None:
            pipe.hset(META, mapping=entries)

        async def work() -> None:
            await self._write(commands)

        if entries:
            await self._call(work)

    async def meta_delete(self, keys: Sequence[str]) -> int:
        """Delete configuration keys; return how many existed."""

        async def commands(pipe: Any) -> None:
            pipe.hdel(META, *keys)

        async def work() -> int:
            return int((await self._write(commands))[0])

        return await self._call(work) if keys else 0

    def commit_stats(self) -> tuple[int, float]:
        """Return (message writes, seconds they took) since the store was opened."""
        return self._commits, self._commit_seconds

    async def maintain(self) -> None:
        """Nothing to tidy: the server keeps its own house."""

    async def close(self) -> None:
        """Close the connection pool; idempotent."""
        await self._redis.aclose(close_connection_pool=True)
