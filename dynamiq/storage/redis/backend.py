"""Redis / Valkey store, standalone or Cluster, on redis-py's asyncio client.

Layout: the id keyspace is cut into ``2^SHARD_BITS`` shards by the top bits of
the id; each (bucket, shard) pair is a hash of records and a sorted set of
fixed-width hex ids (all scores 0, so ``ZRANGEBYLEX`` walks them in id
order). Both keys share the hash tag ``{<bucket>:<shard>}``: a multi-step
change of one shard is one Lua script, and in Cluster mode a queue's shards
spread over the primaries. Configuration lives in one hash.

Every operation is cut into commands, one per shard it touches; the commands
for one server travel in one pipeline on one connection, so that ``WAIT``
(which counts only its own connection's writes) follows the writes it covers.
In Cluster mode the slot map says which primary owns a shard; when it moves
(failover, resharding) the operation fails with ``BackendUnavailable`` and
the map is refreshed, so the client's retry goes to the new owner. A failed
write is never retried here: a half-applied insert retried would report its
own records as taken ids.

Durability follows the servers: run them with ``appendonly yes`` and
``appendfsync always`` for an fsync before every acknowledgement;
``waitreplicas`` also waits for that many replicas of each written primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from dynamiq.errors import BackendUnavailable
from dynamiq.keyspace import KeyRange
from dynamiq.storage.base import Census, Claimed, Span, census_by_scans, move_in_steps
from dynamiq.storage.redis.census import Censuses
from dynamiq.storage.redis.claims import ClaimedInserts
from dynamiq.storage.redis.layout import (
    SHARD_BITS,
    SHARD_SHIFT,
    Command,
    by_bucket_shard,
    by_shard,
    member,
    queued,
    scatter,
    script_keys,
    shard_keys,
    shard_slot,
)
from dynamiq.storage.redis.router import Cluster, Router, Single
from dynamiq.storage.redis.scripts import (
    DELETE,
    DROP,
    INSERT,
    INSERT_SHARDS,
    MOVE,
    REPLACE,
    SCRIPTS,
    TOTAL,
)
from dynamiq.storage.redis.totals import MARK, slot_counters

try:
    import redis.asyncio as aioredis
    from redis.exceptions import NoScriptError, OutOfMemoryError, RedisError
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("the Redis store needs redis-py: pip install 'dynamiq[redis]'") from exc

__all__ = ["RedisBackend"]

log = logging.getLogger("dynamiq.storage")

META = "dq:meta"
META_SCAN = 10_000  # configuration entries a server walks per step of a prefix's scan
GLOB = frozenset("*?[]\\")  # a key's characters a scan's pattern must escape
WAIT_MS = 5000
FULL_RETRY_SECONDS = 5  # what a write refused by a full server is told to wait


class RedisBackend:
    """``StorageBackend`` on Redis or Valkey: one server, or a Cluster given several URLs."""

    def __init__(self, url: str, wait_replicas: int = 0, pool_size: int = 16) -> None:
        urls = [u.strip() for u in url.split(",") if u.strip()]
        self._router: Router = Cluster(urls, pool_size) if len(urls) > 1 else Single(url, pool_size)
        self._censuses = Censuses(self._router, self._run)
        self._claimed = ClaimedInserts(self._run)
        self._counted: bool | None = None  # whether the slots' counters count every message
        # Per server, a counter it holds and all of them, space-separated (``TOTAL``)
        self._counter_groups: list[tuple[str, str]] | None = None
        self._wait_replicas = wait_replicas
        self._commits = 0
        self._commit_seconds = 0.0

    # -- the one way commands reach the servers --------------------------------

    async def _run(self, commands: Sequence[Command], write: bool = False) -> list[Any]:
        """Run commands, one pipeline per server; return their results in order."""
        by_server: dict[aioredis.Redis, list[int]] = defaultdict(list)
        try:
            for index, (key, _) in enumerate(commands):
                by_server[await self._router.server_for(key)].append(index)
            results: list[Any] = [None] * len(commands)
            answers = await asyncio.gather(
                *(
                    self._pipeline(server, [commands[i] for i in idx], write)
                    for server, idx in by_server.items()
                )
            )
        except (RedisError, OSError) as exc:
            raise await self._failed(exc) from exc
        for idx, answer in zip(by_server.values(), answers, strict=True):
            for i, result in zip(idx, answer, strict=True):
                if isinstance(result, Exception):  # e.g. MOVED after a failover
                    raise await self._failed(result) from result
                results[i] = result
        return results

    async def _failed(self, exc: Exception) -> BackendUnavailable:
        """A server's error as the 503 it is, the slot map refreshed for the retry."""
        await self._refresh_quietly()
        return _unavailable(exc)

    async def _pipeline(
        self, server: aioredis.Redis, commands: list[Command], write: bool
    ) -> list[Any]:
        # Reset on the way out, failed or not: a pipeline left holding its connection
        # (a server gone mid-call) is reported "Unclosed" when collected.
        async with server.pipeline(transaction=False) as pipe:
            for _, add in commands:
                await add(pipe)
            if write and self._wait_replicas:
                pipe.wait(self._wait_replicas, WAIT_MS)
            results: list[Any] = await pipe.execute(raise_on_error=False)
        if write and self._wait_replicas:
            acked = results.pop()
            if not isinstance(acked, int) or acked < self._wait_replicas:
                raise BackendUnavailable(f"only {acked} replicas acknowledged the write")
        refused = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
        if refused:  # a server new, restarted or flushed: it learns the scripts, runs them
            for script in SCRIPTS:
                await server.script_load(script.source)
            again = await self._pipeline(server, [commands[i] for i in refused], write)
            for i, result in zip(refused, again, strict=True):
                results[i] = result
        return results

    async def _refresh_quietly(self) -> None:
        with contextlib.suppress(RedisError, OSError):  # the next operation tries again
            await self._router.refresh()

    # -- messages ------------------------------------------------------------

    async def insert(self, items: Sequence[tuple[str, int, bytes]]) -> list[bool]:
        """Create objects, never overwriting; per item, whether it was stored: one script
        for one shard, else one per server over the shards it holds."""
        await self._counting()  # an empty store is marked counted before its first message
        groups = by_bucket_shard(items)
        if len(groups) == 1:
            [((bucket, shard), idx)] = groups.items()
            keys = script_keys(bucket, shard)
            args = [v for i in idx for v in (member(items[i][1]), items[i][2])]
            commands, order = [(keys[0], INSERT.call(keys, args))], list(groups.values())
        else:
            commands, order = await self._inserts_by_server(items, groups)
        started = asyncio.get_running_loop().time()
        results = await self._run(commands, True)
        self._commits += 1
        self._commit_seconds += asyncio.get_running_loop().time() - started
        return scatter(len(items), order, results, bool)

    async def _inserts_by_server(
        self, items: Sequence[tuple[str, int, bytes]], groups: dict[tuple[str, int], list[int]]
    ) -> tuple[list[Command], list[list[int]]]:
        """One ``INSERT_SHARDS`` per server over the shards of ``groups`` it holds, and
        per command the items it answers for, in its answer's order."""
        slots = [shard_slot(bucket, shard) for bucket, shard in groups]
        servers = await self._router.servers_of(slots)
        by_server: dict[Any, tuple[str, list[Any], list[int]]] = {}
        for ((bucket, shard), idx), slot, server in zip(
            groups.items(), slots, servers, strict=True
        ):
            keys = script_keys(bucket, shard, slot)
            _, args, order = by_server.setdefault(server, (keys[0], [], []))
            args += (*keys, len(idx))
            for i in idx:
                args += (member(items[i][1]), items[i][2])
            order += idx
        commands = [(route, INSERT_SHARDS.call([], args)) for route, args, _ in by_server.values()]
        return commands, [order for _, _, order in by_server.values()]

    async def get(self, bucket: str, keys: Sequence[int]) -> list[bytes | None]:
        """Return the value of each key, None where absent."""
        groups = by_shard(keys)

        def command(shard: int, idx: list[int]) -> Command:
            h = shard_keys(bucket, shard)[0]
            fields = [member(keys[i]) for i in idx]
            return h, lambda pipe: queued(pipe.hmget(h, fields))

        results = await self._run([command(s, idx) for s, idx in groups.items()])
        return scatter(len(keys), groups.values(), results, lambda v: cast("bytes | None", v))

    async def delete(self, bucket: str, keys: Sequence[int]) -> list[bool]:
        """Delete keys; per key, whether it existed."""
        groups = by_shard(keys)

        def command(shard: int, idx: list[int]) -> Command:
            scripted = script_keys(bucket, shard)
            args = [member(keys[i]) for i in idx]
            return scripted[0], DELETE.call(scripted, args)

        results = await self._run([command(s, idx) for s, idx in groups.items()], True)
        return scatter(len(keys), groups.values(), results, bool)

    async def replace(self, bucket: str, items: Sequence[tuple[int, bytes]]) -> list[bool]:
        """Overwrite existing keys; per item, whether the key existed.

        Not held back by ``waitreplicas``: a receive count reaches the primary
        (fsynced there) and its replicas in their own time, so that a shard
        whose replica is gone still serves receives; a primary lost before
        replicating may forget the last increments of its messages' counts.
        """
        groups = by_shard([key for key, _ in items])

        def command(shard: int, idx: list[int]) -> Command:
            pair = list(shard_keys(bucket, shard))
            args = [v for i in idx for v in (member(items[i][0]), items[i][1])]
            return pair[0], REPLACE.call(pair, args)

        results = await self._run([command(s, idx) for s, idx in groups.items()])
        return scatter(len(items), groups.values(), results, bool)

    async def move(self, items: Sequence[tuple[str, int, str, int, bytes]]) -> list[bool | None]:
        """Move objects: one script per shard when source and target share it; else the
        target is created first and the source deleted after (at-least-once)."""
        local: dict[tuple[str, int], list[int]] = defaultdict(list)
        across: list[int] = []
        for index, (src, sk, dst, dk, _) in enumerate(items):
            shard = sk >> SHARD_SHIFT
            if src == dst and dk >> SHARD_SHIFT == shard:
                local[src, shard].append(index)
            else:
                across.append(index)
        out: list[bool | None] = [None] * len(items)

        def command(bucket: str, shard: int, idx: list[int]) -> Command:
            keys = script_keys(bucket, shard)
            args = [v for i in idx for v in (member(items[i][1]), member(items[i][3]), items[i][4])]
            return keys[0], MOVE.call(keys, args)

        if local:
            results = await self._run([command(b, s, idx) for (b, s), idx in local.items()], True)
            moved = scatter(len(items), local.values(), results, lambda v: int(v))
            for idx in local.values():
                for i in idx:
                    out[i] = None if moved[i] < 0 else bool(moved[i])
        if across:
            steps = await move_in_steps(self, [items[i] for i in across])
            for i, outcome in zip(across, steps, strict=True):
                out[i] = outcome
        return out

    async def insert_claimed(self, items: Sequence[Claimed], now_ms: int) -> list[bool | bytes]:
        """Insert objects with their claims (``claims``): atomic where the object is
        in its claim's home shard, hidden until claimed elsewhere."""
        await self._counting()
        return await self._claimed.insert(items, now_ms)

    async def scan(
        self, bucket: str, ranges: Sequence[KeyRange], limit: int | Sequence[int]
    ) -> list[list[int]]:
        """Return, per inclusive range, its first keys in ascending order."""
        limits = [limit] * len(ranges) if isinstance(limit, int) else list(limit)
        commands: list[Command] = []
        spans: list[int] = []
        for (lo, hi), n in zip(ranges, limits, strict=True):
            shards = range(lo >> SHARD_SHIFT, (hi >> SHARD_SHIFT) + 1) if n > 0 else range(0)
            for shard in shards:
                z = shard_keys(bucket, shard)[1]
                commands.append((z, _range_command(z, member(lo), member(hi), n)))
            spans.append(len(shards))
        found = iter(await self._run(commands))
        # A range over several shards is cut to its limit after the fact.
        return [
            [int(m, 16) for _ in range(span) for m in next(found)][:n]
            for span, n in zip(spans, limits, strict=True)
        ]

    async def count(self, bucket: str) -> int:
        """Return how many objects of the bucket walks can reach (the sorted sets: an
        object hidden until its claim is made elsewhere is not counted)."""
        commands: list[Command] = []
        for shard in range(1 << SHARD_BITS):
            z = shard_keys(bucket, shard)[1]
            commands.append((z, _zcard_command(z)))
        return sum(await self._run(commands))

    async def total(self) -> int | None:
        """Return the sum of the slots' counters (``totals``); None for a store
        they did not count from empty."""
        if not await self._counting():
            return None
        if self._counter_groups is None:
            by_server: dict[aioredis.Redis, list[str]] = defaultdict(list)
            for key in slot_counters():
                by_server[await self._router.server_for(key)].append(key)
            self._counter_groups = [(keys[0], " ".join(keys)) for keys in by_server.values()]
        try:
            sums = await self._run(
                [(first, TOTAL.call([], [keys])) for first, keys in self._counter_groups]
            )
        except BackendUnavailable:
            self._counter_groups = None  # the slots may have moved
            raise
        return sum(int(n) for n in sums)

    async def _counting(self) -> bool:
        """Whether the slots' counters count every message: the store is marked so, or
        holds none yet and is marked now (asked once a process)."""
        if self._counted is None:
            try:
                server = await self._router.server_for(MARK)
                if not await server.exists(MARK) and await self._holds_messages():
                    log.warning(
                        "this Redis store holds messages written before their total was "
                        "kept: the stats sum their page"
                    )
                    self._counted = False
                else:
                    await server.set(MARK, b"1", nx=True)
                    self._counted = True
            except (RedisError, OSError) as exc:
                raise await self._failed(exc) from exc
        return self._counted

    async def _holds_messages(self) -> bool:
        """Whether any server holds a shard's sorted set."""
        for server in await self._router.primaries():
            cursor = None
            while cursor != 0:
                cursor, keys = await server.scan(cursor or 0, match="dq:{*}:z", count=1000)
                if keys:
                    return True
        return False

    async def census(self, bucket: str, spans: Sequence[Span], cap: int) -> Census:
        """The bucket's count, and per span its first key and the keys after its cut:
        one script per server over the shards it holds (those of a stats page's
        queues together), when the spans are the shards cut at one point
        (``census``); else by scans."""
        found = await self._censuses.census(bucket, spans, cap)
        return found if found is not None else await census_by_scans(self, bucket, spans, cap)

    async def drop(self, bucket: str) -> None:
        """Delete every object of a bucket."""
        commands: list[Command] = []
        for shard in range(1 << SHARD_BITS):
            keys = script_keys(bucket, shard)
            commands.append((keys[0], DROP.call(keys, [])))
        await self._run(commands, True)

    # -- configuration -------------------------------------------------------

    async def meta_get(self, key: str) -> bytes | None:
        """Return a configuration value, None if absent."""
        (value,) = await self._run([(META, lambda pipe: queued(pipe.hget(META, key)))])
        return cast("bytes | None", value)

    async def meta_scan(self, prefix: str) -> dict[str, bytes]:
        """Return every configuration entry whose key starts with ``prefix``: with one,
        the server walks the hash and sends back only those (every upkeep round looks
        for drop marks among a hundred thousand queues' records); without, all."""
        if not prefix:
            (entries,) = await self._run([(META, lambda pipe: queued(pipe.hgetall(META)))])
        else:
            try:
                server = await self._router.server_for(META)
                match = "".join(f"\\{c}" if c in GLOB else c for c in prefix) + "*"
                entries = {k: v async for k, v in server.hscan_iter(META, match, META_SCAN)}
            except (RedisError, OSError) as exc:
                raise await self._failed(exc) from exc
        found = {k.decode(): v for k, v in cast("dict[bytes, bytes]", entries).items()}
        return {k: v for k, v in sorted(found.items()) if k.startswith(prefix)}

    async def meta_create(self, key: str, value: bytes) -> bool:
        """Store a configuration value only if the key is absent."""
        (created,) = await self._run(
            [(META, lambda pipe: queued(pipe.hsetnx(META, key, value)))], True
        )
        return bool(created)

    async def meta_put(self, entries: dict[str, bytes], delete: Sequence[str] = ()) -> None:
        """Store configuration values, overwriting, then delete ``delete``: one pipeline
        to the server holding them, run in that order."""
        mapping = cast("dict[Any, Any]", entries)
        commands: list[Command] = []
        if entries:
            commands.append((META, lambda pipe: queued(pipe.hset(META, mapping=mapping))))
        if delete:
            commands.append((META, lambda pipe: queued(pipe.hdel(META, *delete))))
        if commands:
            await self._run(commands, True)

    async def meta_delete(self, keys: Sequence[str]) -> int:
        """Delete configuration keys; return how many existed."""
        if not keys:
            return 0
        (gone,) = await self._run([(META, lambda pipe: queued(pipe.hdel(META, *keys)))], True)
        return int(gone)

    def commit_stats(self) -> tuple[int, float]:
        """Return (message writes, seconds they took) since the store was opened."""
        return self._commits, self._commit_seconds

    async def maintain(self) -> None:
        """Nothing to tidy: the servers keep their own house."""

    async def close(self) -> None:
        """Close every connection pool; idempotent."""
        await self._router.close()


def _unavailable(exc: BaseException) -> BackendUnavailable:
    """A Redis error as the 503 it is: a server out of memory (``maxmemory`` with
    ``noeviction``) or unable to persist (``MISCONF``: its disk) refuses writes that
    add data until consumers make room; it is told to wait longer than a failover."""
    text = str(exc)
    if isinstance(exc, OutOfMemoryError) or text.startswith(("OOM", "MISCONF")):
        return BackendUnavailable(
            f"the Redis store is full, publishes wait until consumers make room: {text}",
            retry_after=FULL_RETRY_SECONDS,
        )
    return BackendUnavailable(f"Redis: {text}")


def _range_command(z: str, lo: str, hi: str, n: int) -> Callable[[Any], Awaitable[Any]]:
    return lambda pipe: queued(pipe.zrangebylex(z, f"[{lo}", f"[{hi}", start=0, num=n))


def _zcard_command(z: str) -> Callable[[Any], Awaitable[Any]]:
    return lambda pipe: queued(pipe.zcard(z))
