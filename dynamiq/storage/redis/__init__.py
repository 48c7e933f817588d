"""Redis / Valkey (``RedisBackend``): the storage port on a server or a Cluster, through
redis-py's asyncio client.

- ``backend``: the port's methods, each cut into one pipeline per server;
- ``layout``: where keys live, and how an operation is cut by shard (pure);
- ``scripts``: the Lua that changes one shard atomically;
- ``router``: which server holds a key (one server, or a Cluster's slot map);
- ``claims``: inserts that hold a claim (deduplication), also across shards;
- ``census``, ``totals``: what a queue holds, and every message counted per hash slot.
"""

from dynamiq.storage.redis.backend import RedisBackend

__all__ = ["RedisBackend"]
