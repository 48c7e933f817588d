"""Where the Redis store keeps things, and how an operation is cut by shard (pure).

The id keyspace is cut into ``2^SHARD_BITS`` shards by the top bits of the
id; each (bucket, shard) pair is a hash of records and a sorted set of
fixed-width hex ids, both under the hash tag ``{<bucket>:<shard>}``; beside
them in their slot, the count of every sorted set's members there.
"""

from __future__ import annotations

from binascii import crc_hqx
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from dynamiq.storage.redis.totals import slot_counter

try:
    from redis.crc import key_slot
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("the Redis store needs redis-py: pip install 'dynamiq[redis]'") from exc

__all__ = [
    "SHARD_BITS",
    "SHARD_SHIFT",
    "Command",
    "by_bucket_shard",
    "by_shard",
    "member",
    "queued",
    "scatter",
    "script_keys",
    "shard_keys",
    "shard_slot",
    "shard_slots",
]

T = TypeVar("T")
SHARD_BITS = 8  # the top 8 bits: one stripe of the queue engine
SHARD_SHIFT = 63 - SHARD_BITS

SLOT_MASK = 16383  # a Cluster's 16,384 slots
_TAG_SUFFIXES = [f":{shard}".encode() for shard in range(1 << SHARD_BITS)]

# One command for one server: (routing key, adds the command to a pipeline).
Command = tuple[str, Callable[[Any], Awaitable[Any]]]


def member(key: int) -> str:
    """An id as its sorted set holds it: fixed-width hex, so that lexical order is id order."""
    return f"{key:016x}"


def shard_keys(bucket: str, shard: int) -> tuple[str, str]:
    """The hash of records and the sorted set of ids of one bucket's shard."""
    tag = f"{{{bucket}:{shard}}}"
    return f"dq:{tag}:h", f"dq:{tag}:z"


def shard_slot(bucket: str, shard: int) -> int:
    """The Cluster slot of a bucket's shard (of its keys' tag, ``shard_keys``)."""
    if "{" in bucket or "}" in bucket:  # the tag ends sooner: as Redis reads the key
        return key_slot(shard_keys(bucket, shard)[1].encode())
    return crc_hqx(f"{bucket}:{shard}".encode(), 0) & SLOT_MASK


def shard_slots(bucket: str) -> list[int]:
    """The slot of each of the bucket's shards (``shard_slot``): the CRC of the tag's
    bucket part taken once, each shard's suffix added to it."""
    if "{" in bucket or "}" in bucket:
        return [shard_slot(bucket, shard) for shard in range(1 << SHARD_BITS)]
    head = crc_hqx(bucket.encode(), 0)
    return [crc_hqx(suffix, head) & SLOT_MASK for suffix in _TAG_SUFFIXES]


def script_keys(bucket: str, shard: int, slot: int | None = None) -> list[str]:
    """What a script that changes a shard's sorted set is given: the shard's hash and
    sorted set, then the counter of every sorted set's members in its slot
    (``totals``; reads have no need of it). ``slot``: the shard's, if known."""
    if slot is None:
        slot = shard_slot(bucket, shard)
    return [*shard_keys(bucket, shard), slot_counter(slot)]


async def queued(result: Any) -> Any:
    return result  # pipeline methods queue the command and return the pipeline


def by_bucket_shard(items: Sequence[tuple[Any, ...]]) -> dict[tuple[str, int], list[int]]:
    """Group items that start ``(bucket, key, ...)`` by bucket and shard, in order."""
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for index, item in enumerate(items):
        groups[item[0], item[1] >> SHARD_SHIFT].append(index)
    return groups


def by_shard(keys: Sequence[int]) -> dict[int, list[int]]:
    """Group keys by shard, in order."""
    groups: dict[int, list[int]] = defaultdict(list)
    for index, key in enumerate(keys):
        groups[key >> SHARD_SHIFT].append(index)
    return groups


def scatter(size: int, groups: Any, results: list[Any], convert: Callable[[Any], T]) -> list[T]:
    """Put per-group result lists back in the order of the items they came from."""
    out: list[Any] = [None] * size
    for idx, values in zip(groups, results, strict=True):
        for i, value in zip(idx, values, strict=True):
            out[i] = convert(value)
    return out
