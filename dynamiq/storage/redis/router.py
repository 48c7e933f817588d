"""Which Redis server holds a key: one server, or the primary of a Cluster that owns the
key's slot (one connection pool per primary, the slot map refreshed when it moves)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

from dynamiq.errors import BackendUnavailable

try:
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import ClusterNode, RedisCluster
    from redis.connection import HiredisRespSerializer
    from redis.crc import key_slot
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("the Redis store needs redis-py: pip install 'dynamiq[redis]'") from exc

__all__ = ["SOCKET_TIMEOUT", "Cluster", "Router", "Single"]

SOCKET_TIMEOUT = 5.0  # a server that stops answering fails requests (503), not hangs them


class _Connection(aioredis.Connection):
    """redis-py's asyncio connection, packing commands in C as its blocking client does
    (hiredis): its own packer spends microseconds of Python on every argument, and a
    fan-out's one script a server carries tens of thousands."""

    # redis-py 8.2 leaves the serializer's constructor untyped; earlier releases type it.
    _packer: Any = cast(Callable[[], Any], HiredisRespSerializer)()

    def pack_command(self, *args: Any) -> list[bytes]:
        packed: list[bytes] = self._packer.pack(*args)
        return packed


def _pool(host: str, port: int, db: int, size: int) -> aioredis.Redis:
    pool = aioredis.BlockingConnectionPool(
        connection_class=_Connection,
        host=host,
        port=port,
        db=db,
        max_connections=size,
        timeout=10,
        socket_timeout=SOCKET_TIMEOUT,
        socket_connect_timeout=SOCKET_TIMEOUT,
    )
    return aioredis.Redis(connection_pool=pool)


class Router(Protocol):
    """Which server holds a key."""

    async def server_for(self, key: str) -> aioredis.Redis: ...
    async def servers_of(self, slots: Sequence[int]) -> list[aioredis.Redis]: ...
    async def primaries(self) -> list[aioredis.Redis]: ...
    async def refresh(self) -> None: ...
    async def close(self) -> None: ...


class Single:
    """Every key lives on one server."""

    def __init__(self, url: str, size: int) -> None:
        parts = urlsplit(url)
        db = int(parts.path.strip("/") or 0)
        self._server = _pool(parts.hostname or "127.0.0.1", parts.port or 6379, db, size)

    async def server_for(self, key: str) -> aioredis.Redis:
        return self._server

    async def servers_of(self, slots: Sequence[int]) -> list[aioredis.Redis]:
        return [self._server] * len(slots)

    async def primaries(self) -> list[aioredis.Redis]:
        return [self._server]

    async def refresh(self) -> None:
        """Nothing moves on one server."""

    async def close(self) -> None:
        await self._server.aclose(close_connection_pool=True)


class Cluster:
    """Keys live on the primary that owns their slot; one pool per primary."""

    def __init__(self, urls: Sequence[str], size: int) -> None:
        nodes = [
            ClusterNode(urlsplit(u).hostname or "127.0.0.1", urlsplit(u).port or 6379) for u in urls
        ]
        self._map = RedisCluster(
            startup_nodes=nodes,
            socket_timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=SOCKET_TIMEOUT,
        )
        self._size = size
        self._servers: dict[tuple[str, int], aioredis.Redis] = {}
        self._by_slot: dict[int, aioredis.Redis] = {}  # as the slot map last said
        self._ready = False

    async def server_for(self, key: str) -> aioredis.Redis:
        return (await self.servers_of([key_slot(key.encode())]))[0]

    async def servers_of(self, slots: Sequence[int]) -> list[aioredis.Redis]:
        """The primary of each slot, as the slot map last said (a queue's 256 shards at
        once: one lookup each)."""
        known = self._by_slot
        found = [known.get(slot) for slot in slots]
        if None in found:
            await self._initialized()
            for k, slot in enumerate(slots):
                if found[k] is None:
                    found[k] = known[slot] = self._primary_of(slot)
        return cast("list[aioredis.Redis]", found)

    def _primary_of(self, slot: int) -> aioredis.Redis:
        owners = self._map.nodes_manager.slots_cache.get(slot)
        if not owners:
            raise BackendUnavailable(f"no Redis Cluster node owns slot {slot}")
        return self._server(owners[0].host, int(owners[0].port))

    async def primaries(self) -> list[aioredis.Redis]:
        await self._initialized()
        return [self._server(node.host, int(node.port)) for node in self._map.get_primaries()]

    async def _initialized(self) -> None:
        if not self._ready:
            await self._map.initialize()
            self._ready = True

    def _server(self, host: str, port: int) -> aioredis.Redis:
        server = self._servers.get((host, port))
        if server is None:
            server = self._servers[host, port] = _pool(host, port, 0, self._size)
        return server

    async def refresh(self) -> None:
        self._ready = False
        self._by_slot.clear()
        await self._map.nodes_manager.initialize()
        self._ready = True

    async def close(self) -> None:
        for server in self._servers.values():
            await server.aclose(close_connection_pool=True)
        await self._map.aclose()
