"""The stored form of a message: a small versioned header, then the body.

Layout (big-endian): ``version:u8 flags:u8 published_ms:u64``; with
``FLAG_META``, then ``length:u16`` and a msgpack ``Meta`` (what the message's
life so far has added: receive count, expiry, dead-letter origin); then the
body, zlib-compressed when ``FLAG_COMPRESSED`` is set. Flags are per message,
so turning a queue's ``compressed_messages`` on or off never strands old
messages, and a message nothing has happened to yet carries no metadata.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Sequence

import msgspec
from zlib_ng import zlib_ng

from dynamiq.errors import ServerError
from dynamiq.models import Attributes, DeadLetter, Message

__all__ = [
    "Meta",
    "RecentRecords",
    "delivered",
    "encode",
    "message",
    "meta_of",
    "meta_of_message",
    "new_life",
    "with_meta",
]

VERSION = 1
FLAG_COMPRESSED = 0x01
FLAG_META = 0x02
_HEADER = struct.Struct(">BBQ")
_META_LENGTH = struct.Struct(">H")
COMPRESSION_LEVEL = 1


class Meta(msgspec.Struct, frozen=True, array_like=True, omit_defaults=True):
    """What a message's life adds to it: the record's optional metadata block.

    ``expires_ms`` is 0 when the message never expires. ``attributes`` and
    ``routing_key`` are its producer's, carried through every life.
    """

    receive_count: int = 0
    first_received_ms: int = 0
    expires_ms: int = 0
    dead_letter: DeadLetter | None = None
    attributes: Attributes | None = None
    routing_key: str | None = None
    group: str | None = None
    dedup_id: str | None = None
    trace: str | None = None
    attribute_types: dict[str, str] | None = None
    tenant: str | None = None


NO_META = Meta()
_encode_meta = msgspec.msgpack.Encoder().encode
_decode_meta = msgspec.msgpack.Decoder(Meta).decode


def encode(body: bytes, published_ms: int, compress: bool, meta: Meta = NO_META) -> bytes:
    """Return the stored record for ``body``."""
    if compress:
        return _pack(FLAG_COMPRESSED, published_ms, meta, zlib_ng.compress(body, COMPRESSION_LEVEL))
    return _pack(0, published_ms, meta, body)


def _pack(flags: int, published_ms: int, meta: Meta, body: bytes) -> bytes:
    if meta == NO_META:
        return _HEADER.pack(VERSION, flags, published_ms) + body
    packed = _encode_meta(meta)
    header = _HEADER.pack(VERSION, flags | FLAG_META, published_ms)
    return b"".join((header, _META_LENGTH.pack(len(packed)), packed, body))


def _split(record: bytes) -> tuple[int, int, Meta, int]:
    """Return ``(flags, published_ms, meta, offset of the body)``."""
    if len(record) < _HEADER.size or record[0] != VERSION:
        raise ServerError("stored message record has an unknown format")
    _, flags, published_ms = _HEADER.unpack_from(record)
    if not flags & FLAG_META:
        return flags, published_ms, NO_META, _HEADER.size
    (length,) = _META_LENGTH.unpack_from(record, _HEADER.size)
    start = _HEADER.size + _META_LENGTH.size
    return flags, published_ms, _decode_meta(record[start : start + length]), start + length


def meta_of(record: bytes) -> tuple[int, Meta]:
    """Return ``(published_ms, meta)`` of a stored record, without its body."""
    _, published_ms, meta, _ = _split(record)
    return published_ms, meta


def with_meta(record: bytes, meta: Meta) -> bytes:
    """Return ``record`` with its metadata replaced (the body is copied, not decoded)."""
    flags, published_ms, _, offset = _split(record)
    return _pack(flags & ~FLAG_META, published_ms, meta, record[offset:])


def counted_to(record: bytes, count: int, first_received_ms: int) -> bytes | None:
    """Return ``record`` with its receive count raised to ``count`` (first received
    then, unless it was before), or None when its count is not lower."""
    meta = _split(record)[2]
    if meta.receive_count >= count:
        return None
    first = meta.first_received_ms or first_received_ms
    raised = msgspec.structs.replace(meta, receive_count=count, first_received_ms=first)
    return with_meta(record, raised)


def message(message_id: int, record: bytes) -> Message:
    """Return the message a stored record holds."""
    return _message(message_id, record, 0)


def delivered(message_id: int, record: bytes, now_ms: int) -> Message:
    """Return the message a stored record holds as this delivery hands it out: its
    receive count raised by one, first received now unless it was before."""
    return _message(message_id, record, now_ms)


def _message(message_id: int, record: bytes, received_ms: int) -> Message:
    flags, published_ms, meta, offset = _split(record)
    body = record[offset:]
    if flags & FLAG_COMPRESSED:
        body = zlib_ng.decompress(body)
    if received_ms:
        count, first = meta.receive_count + 1, meta.first_received_ms or received_ms
    elif meta is NO_META:
        return Message(message_id, body, published_ms)
    else:
        count, first = meta.receive_count, meta.first_received_ms
    return Message(
        message_id,
        body,
        published_ms,
        count,
        first,
        meta.dead_letter,
        meta.expires_ms,
        meta.attributes,
        meta.routing_key,
        meta.group,
        meta.dedup_id,
        meta.trace,
        meta.attribute_types,
        meta.tenant,
    )


def new_life(meta: Meta, expires_ms: int = 0, dead_letter: DeadLetter | None = None) -> Meta:
    """A message's metadata as it starts a new life in another queue (dead-lettered or
    redriven): receives counted from zero; what its producer attached kept."""
    return Meta(
        expires_ms=expires_ms,
        dead_letter=dead_letter,
        attributes=meta.attributes,
        routing_key=meta.routing_key,
        group=meta.group,
        dedup_id=meta.dedup_id,
        trace=meta.trace,
        attribute_types=meta.attribute_types,
        tenant=meta.tenant,
    )


def meta_of_message(message: Message) -> Meta:
    """Return the metadata a record of ``message`` carries."""
    return Meta(
        message.receive_count,
        message.first_received_ms,
        message.expires_ms,
        message.dead_letter,
        message.attributes,
        message.routing_key,
        message.group,
        message.dedup_id,
        message.trace,
        message.attribute_types,
        message.tenant,
    )


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
