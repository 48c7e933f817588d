"""Which Redis server holds a key: one server, or the primary of a Cluster that owns the
key's slot (one connection pool per primary, the slot map refreshed when it moves)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol
from urllib.parse import urlsplit

from dynamiq.errors import BackendUnavailable

try:
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import ClusterNode, RedisCluster
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("the Redis store needs redis-py: pip install 'dynamiq[redis]'") from exc

__all__ = ["SOCKET_TIMEOUT", "Cluster", "Router", "Single"]

SOCKET_TIMEOUT = 5.0  # a server that stops answering fails requests (503), not hangs them


def _pool(host: str, port: int, db: int, size: int) -> aioredis.Redis:
    pool = aioredis.BlockingConnectionPool(
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
        self._ready = False

    async def server_for(self, key: str) -> aioredis.Redis:
        await self._initialized()
        node = self._map.get_node_from_key(key)
        if node is None:
            raise BackendUnavailable(f"no Redis Cluster node owns the slot of {key}")
        return self._server(node.host, int(node.port))

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
        await self._map.nodes_manager.initialize()
        self._ready = True

    async def close(self) -> None:
        for server in self._servers.values():
            await server.aclose(close_connection_pool=True)
        await self._map.aclose()
