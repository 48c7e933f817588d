"""The stored form of a message: a small versioned header, then the body.

Layout (big-endian): ``version:u8 flags:u8 published_ms:u64`` then the body,
zlib-compressed when ``FLAG_COMPRESSED`` is set. The flag is per message, so
turning a queue's ``compressed_messages`` on or off never strands old
messages. New fields (attributes, delivery delay) get new flag bits.
"""

from __future__ import annotations

import struct

from zlib_ng import zlib_ng

from dynamiq.errors import ServerError

__all__ = ["decode", "encode"]

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
