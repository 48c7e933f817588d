"""The Lua scripts of the Redis store: each changes one shard (its hash of records
and its sorted set of ids, ``KEYS[1]`` and ``KEYS[2]``) in one step, and adds
what it added to or took from the sorted set to its slot's counter (``KEYS[3]``,
``totals``).

A script travels in a pipeline by its digest alone (``Lua.call``); a server that
does not know it answers NOSCRIPT, and the store loads every script there and
runs again what it refused (``SCRIPTS``). redis-py's own scripts would ask each
server whether it knows them before every pipeline: a round trip more for each.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from dynamiq.storage.redis.layout import queued

__all__ = [
    "CENSUS",
    "CLAIM",
    "DELETE",
    "DROP",
    "HIDE",
    "INSERT",
    "INSERT_CLAIMED",
    "INSERT_SHARDS",
    "MOVE",
    "REPLACE",
    "SCRIPTS",
    "SHOW",
    "TOTAL",
    "Lua",
]


class Lua:
    """A script, called by its digest."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    def call(self, keys: Sequence[str], args: Sequence[Any]) -> Callable[[Any], Awaitable[Any]]:
        """Queue the script in a pipeline, on ``keys`` with ``args``."""
        return lambda pipe: queued(pipe.evalsha(self.sha, len(keys), *keys, *args))


INSERT = Lua(
    """
local out, added = {}, 0
for i = 1, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then
    added = added + redis.call('ZADD', KEYS[2], 0, ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if added > 0 then redis.call('INCRBY', KEYS[3], added) end
return out
"""
)

# INSERT over many shards of this server at once (a fan-out's thousands of
# queues, a batch over many stripes): their keys are in different slots, so
# they travel in ARGV (the flag lets a script write keys of several slots of its
# own server). ARGV, per shard: its hash, its sorted set, its slot's counter,
# how many objects, then each object's member and record. Per object, as INSERT.
INSERT_SHARDS = Lua(
    """#!lua flags=allow-cross-slot-keys
local out, i = {}, 1
while i <= #ARGV do
  local h, z, counter, last = ARGV[i], ARGV[i + 1], ARGV[i + 2], i + 3 + 2 * tonumber(ARGV[i + 3])
  local added = 0
  for j = i + 4, last, 2 do
    if redis.call('HSETNX', h, ARGV[j], ARGV[j + 1]) == 1 then
      added = added + redis.call('ZADD', z, 0, ARGV[j])
      out[#out + 1] = 1
    else
      out[#out + 1] = 0
    end
  end
  if added > 0 then redis.call('INCRBY', counter, added) end
  i = last + 1
end
return out
"""
)

DELETE = Lua(
    """
local out, removed = {}, 0
for i = 1, #ARGV do
  local gone = redis.call('HDEL', KEYS[1], ARGV[i])
  if gone == 1 then removed = removed + redis.call('ZREM', KEYS[2], ARGV[i]) end
  out[#out + 1] = gone
end
if removed > 0 then redis.call('DECRBY', KEYS[3], removed) end
return out
"""
)

REPLACE = Lua(
    """
local out = {}
for i = 1, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
"""
)

# A move inside one shard: 1 moved, 0 source absent, -1 target taken.
MOVE = Lua(
    """
local out, change = {}, 0
for i = 1, #ARGV, 3 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then
    out[#out + 1] = 0
  elseif redis.call('HSETNX', KEYS[1], ARGV[i + 1], ARGV[i + 2]) == 0 then
    out[#out + 1] = -1
  else
    redis.call('HDEL', KEYS[1], ARGV[i])
    change = change - redis.call('ZREM', KEYS[2], ARGV[i])
    change = change + redis.call('ZADD', KEYS[2], 0, ARGV[i + 1])
    out[#out + 1] = 1
  end
end
if change ~= 0 then redis.call('INCRBY', KEYS[3], change) end
return out
"""
)

# KEYS: the shard's hash, sorted set and counter, then per object its claim and the claim's
# note (where a copy inserted in another shard lies, see ``claims``). ARGV:
# the caller's clock (epoch ms), then per object its member, value, claim record
# (13-digit expiry, then value) and the claim's time to live (ms). Per object:
# 1 stored and claimed, 0 its id taken, else the live claim's record and note.
INSERT_CLAIMED = Lua(
    """
local out, added = {}, 0
local now = tonumber(ARGV[1])
for i = 1, (#KEYS - 3) / 2 do
  local a = i * 4 - 2
  local claim, note = KEYS[i * 2 + 2], KEYS[i * 2 + 3]
  local held = redis.call('GET', claim)
  if held and tonumber(string.sub(held, 1, 13)) > now then
    out[i] = {held, redis.call('GET', note) or ''}
  elseif redis.call('HSETNX', KEYS[1], ARGV[a], ARGV[a + 1]) == 1 then
    added = added + redis.call('ZADD', KEYS[2], 0, ARGV[a])
    redis.call('SET', claim, ARGV[a + 2], 'PX', ARGV[a + 3])
    redis.call('DEL', note)
    out[i] = 1
  else
    out[i] = 0
  end
end
if added > 0 then redis.call('INCRBY', KEYS[3], added) end
return out
"""
)

# An object stored out of sight: in its shard's hash, not its sorted set. ARGV:
# member, value pairs. Per object: 1 stored, 0 its id taken.
HIDE = Lua(
    """
local out = {}
for i = 1, #ARGV, 2 do
  out[#out + 1] = redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1])
end
return out
"""
)

# A claim for an object in another shard. KEYS: the claim and its note. ARGV: the
# caller's clock, the claim record, its time to live (ms), and the note (where
# the object lies: its bucket's shard and member). 1 recorded, else the live
# claim's record and note.
CLAIM = Lua(
    """
local held = redis.call('GET', KEYS[1])
if held and tonumber(string.sub(held, 1, 13)) > tonumber(ARGV[1]) then
  return {held, redis.call('GET', KEYS[2]) or ''}
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[3])
return 1
"""
)

# Objects hidden by a claimed insert shown to walks, those still there. ARGV: members.
SHOW = Lua(
    """
local shown = 0
for i = 1, #ARGV do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    shown = shown + redis.call('ZADD', KEYS[2], 0, ARGV[i])
  end
end
if shown > 0 then redis.call('INCRBY', KEYS[3], shown) end
return shown
"""
)

# A census of one bucket's shards held by this server, read only: the shards'
# sorted sets are in different slots, so they are named here, not in KEYS (the
# flag lets a script read keys of several slots of its own server). ARGV: the
# cap, the bucket, the cut (a member: every shard's span is cut at its first id
# OR the cut, and a shard's first member is 3 hex digits of 8 times its index,
# then 13 of the rest), and the shards' indexes, space-separated. Per shard
# that holds any member (an idle queue's hold none: one call each): its index,
# its count, its first member up to its cut (false: none), and how many members
# lie after the cut (up to the cap).
CENSUS = Lua(
    """#!lua flags=no-writes,allow-cross-slot-keys
local cap, bucket, cut = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local top, rest = tonumber(string.sub(cut, 1, 3), 16), string.sub(cut, 4)
local out = {}
for shard in string.gmatch(ARGV[4], '%d+') do
  local z = 'dq:{' .. bucket .. ':' .. shard .. '}:z'
  local card = redis.call('ZCARD', z)
  if card > 0 then
    local base = tonumber(shard) * 8
    local lo = '[' .. string.format('%03x', base) .. '0000000000000'
    local mid = string.format('%03x', base + top) .. rest
    local hi = '[' .. string.format('%03x', base + 7) .. 'fffffffffffff'
    local head = redis.call('ZRANGEBYLEX', z, lo, '[' .. mid, 'LIMIT', 0, 1)
    out[#out + 1] = tonumber(shard)
    out[#out + 1] = card
    out[#out + 1] = head[1] or false
    out[#out + 1] = math.min(cap, redis.call('ZLEXCOUNT', z, '(' .. mid, hi))
  end
end
return out
"""
)

# A bucket's shard dropped whole, its members taken off its slot's counter.
DROP = Lua(
    """
local gone = redis.call('ZCARD', KEYS[2])
redis.call('UNLINK', KEYS[1], KEYS[2])
if gone > 0 then redis.call('DECRBY', KEYS[3], gone) end
return gone
"""
)

# The sum of the counters of the slots this server holds (ARGV: their keys in one
# string, space-separated: thousands of arguments cost the client more than one).
TOTAL = Lua(
    """#!lua flags=no-writes,allow-cross-slot-keys
local total = 0
for key in string.gmatch(ARGV[1], '%S+') do
  total = total + (tonumber(redis.call('GET', key)) or 0)
end
return total
"""
)

SCRIPTS = (
    INSERT,
    INSERT_SHARDS,
    DELETE,
    REPLACE,
    MOVE,
    INSERT_CLAIMED,
    HIDE,
    CLAIM,
    SHOW,
    CENSUS,
    DROP,
    TOTAL,
)
