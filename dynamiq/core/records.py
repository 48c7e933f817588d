"""The stored form of a message: a small versioned header, then the body.

Layout (big-endian): ``version:u8 flags:u8 published_ms:u64`` then the body,
zlib-compressed when ``FLAG_COMPRESSED`` is set. The flag is per message, so
turning a queue's ``compressed_messages`` on or off never strands old
messages. New fields (attributes, delivery delay) get new flag bits.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Sequence

from zlib_ng import zlib_ng

from dynamiq.errors import ServerError

__all__ = ["RecentRecords", "decode", "encode"]

VERSION = 1
FLAG_COMPRESSED = 0x01
_HEADER = struct.Struct(">BBQ")
COMPRESSION_LEVEL = 1


def encode(body: bytes, published_ms: int, compress: bool) -> bytes:
    """Return the stored record for ``body``."""
    if compress:
        return _HEADER.pack(VERSION, FLAG_COMPRESSED, published_ms) + zlib_ng.compress(
            body, COMPRESSION_LEVEL
        )
    return _HEADER.pack(VERSION, 0, published_ms) + body


def decode(record: bytes) -> tuple[bytes, int]:
    """Return ``(body, published_ms)`` from a stored record."""
    if len(record) < _HEADER.size or record[0] != VERSION:
        raise ServerError("stored message record has an unknown format")
    _, flags, published_ms = _HEADER.unpack_from(record)
    body = record[_HEADER.size :]
    if flags & FLAG_COMPRESSED:
        body = zlib_ng.decompress(body)
    return body, published_ms


class RecentRecords:
    """Records this node stored in the last moments, kept so that a receive soon
    after the publish need not read them back from the store.

    Entries leave on their first receive or delete, when older than
    ``max_age`` seconds, or when the byte budget is spent (oldest batch
    first). The age bound is the one within which the partition cursors catch
    up with other processes: a message deleted through another process
    within it may be delivered once more (at-least-once allows it).
    """

    def __init__(self, max_bytes: int, max_age: float) -> None:
        self._max_bytes = max_bytes
        self._max_age = max_age
        self._by_bucket: dict[str, dict[int, bytes]] = {}
        # One entry per stored batch, oldest first: (born, bucket, ids, bytes).
        self._batches: deque[tuple[float, str, Sequence[int], int]] = deque()
        self._bytes = 0

    def add(self, uid: str, ids: Sequence[int], records: Sequence[bytes], now: float) -> None:
        """Keep the records just stored under ``ids`` in bucket ``uid``."""
        size = sum(map(len, records))
        self._by_bucket.setdefault(uid, {}).update(zip(ids, records, strict=True))
        self._batches.append((now, uid, ids, size))
        self._bytes += size
        self.evict(now)

    def take(self, uid: str, ids: Sequence[int], now: float) -> dict[int, bytes]:
        """Remove and return the records of ``ids`` that are kept and young enough."""
        self.evict(now)
        kept = self._by_bucket.get(uid)
        if not kept:
            return {}
        found: dict[int, bytes] = {}
        for message_id in ids:
            record = kept.pop(message_id, None)
            if record is not None:
                found[message_id] = record
        return found

    def discard(self, uid: str, ids: Sequence[int]) -> None:
        """Forget deleted messages."""
        kept = self._by_bucket.get(uid)
        if kept:
            for message_id in ids:
                kept.pop(message_id, None)

    def evict(self, now: float) -> None:
        """Let go of batches older than ``max_age``, and the oldest while over budget."""
        # Bytes are counted per batch as stored; taking a record early does not
        # refund them, so the budget bounds memory from above.
        batches, oldest = self._batches, now - self._max_age
        while batches and (batches[0][0] <= oldest or self._bytes > self._max_bytes):
            _, uid, ids, size = batches.popleft()
            self._bytes -= size
            kept = self._by_bucket.get(uid)
            if kept is not None:
                for message_id in ids:
                    kept.pop(message_id, None)
                if not kept:
                    del self._by_bucket[uid]
