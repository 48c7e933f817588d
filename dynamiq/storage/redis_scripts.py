"""The Lua scripts of the Redis store: each changes one shard (its hash of records
and its sorted set of ids, ``KEYS[1]`` and ``KEYS[2]``) in one step."""

from __future__ import annotations

__all__ = ["CLAIM", "DELETE", "INSERT", "INSERT_CLAIMED", "MOVE", "REPLACE"]

INSERT = """
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

DELETE = """
local out = {}
for i = 1, #ARGV do
  local gone = redis.call('HDEL', KEYS[1], ARGV[i])
  if gone == 1 then redis.call('ZREM', KEYS[2], ARGV[i]) end
  out[#out + 1] = gone
end
return out
"""

REPLACE = """
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

# A move inside one shard: 1 moved, 0 source absent, -1 target taken.
MOVE = """
local out = {}
for i = 1, #ARGV, 3 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then
    out[#out + 1] = 0
  elseif redis.call('HSETNX', KEYS[1], ARGV[i + 1], ARGV[i + 2]) == 0 then
    out[#out + 1] = -1
  else
    redis.call('HDEL', KEYS[1], ARGV[i])
    redis.call('ZREM', KEYS[2], ARGV[i])
    redis.call('ZADD', KEYS[2], 0, ARGV[i + 1])
    out[#out + 1] = 1
  end
end
return out
"""

# KEYS: the shard's hash and sorted set, then one claim per object. ARGV: the
# caller's clock (epoch ms), then per object its member, value, claim record
# (13-digit expiry, then value) and the claim's time to live (ms). Per object:
# 1 stored and claimed, 0 its id taken, else the live claim's record.
INSERT_CLAIMED = """
local out = {}
local now = tonumber(ARGV[1])
for i = 1, #KEYS - 2 do
  local a = i * 4 - 2
  local held = redis.call('GET', KEYS[i + 2])
  if held and tonumber(string.sub(held, 1, 13)) > now then
    out[i] = held
  elseif redis.call('HSETNX', KEYS[1], ARGV[a], ARGV[a + 1]) == 1 then
    redis.call('ZADD', KEYS[2], 0, ARGV[a])
    redis.call('SET', KEYS[i + 2], ARGV[a + 2], 'PX', ARGV[a + 3])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
"""

# A claim alone (its object stored elsewhere): 1 recorded, else the live claim.
CLAIM = """
local held = redis.call('GET', KEYS[1])
if held and tonumber(string.sub(held, 1, 13)) > tonumber(ARGV[1]) then
  return held
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""
