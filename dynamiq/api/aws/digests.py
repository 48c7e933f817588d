"""The MD5 digests SQS answers with, computed exactly as AWS does (pure).

SDKs that check them (Java, JavaScript, .NET, PHP, Go) refuse an answer whose
digest differs from their own, so these follow AWS's documented algorithm
byte for byte.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping

__all__ = ["TypedValue", "attributes_md5", "body_md5"]

# An attribute as SQS carries it: its DataType ("String", "Number.float",
# "Binary", ...) and its value (text, or bytes for a binary type).
TypedValue = tuple[str, str | bytes]

_LENGTH = struct.Struct(">I")
_TEXT, _BINARY = b"\x01", b"\x02"


def body_md5(body: str | bytes) -> str:
    """Hex MD5 of a body's UTF-8 bytes."""
    data = body.encode() if isinstance(body, str) else body
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def attributes_md5(attributes: Mapping[str, TypedValue]) -> str:
    """Hex MD5 of message attributes: sorted by name, each as its length-prefixed name,
    length-prefixed data type, a transport byte (1 text, 2 binary), and its
    length-prefixed value."""
    digest = hashlib.md5(usedforsecurity=False)
    for name in sorted(attributes):
        data_type, value = attributes[name]
        for part in (name.encode(), data_type.encode()):
            digest.update(_LENGTH.pack(len(part)) + part)
        raw = value if isinstance(value, bytes) else value.encode()
        digest.update(_BINARY if isinstance(value, bytes) else _TEXT)
        digest.update(_LENGTH.pack(len(raw)) + raw)
    return digest.hexdigest()
