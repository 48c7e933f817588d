"""Receipt handles: what one receive of one message hands its consumer (pure).

A handle names the message and the delivery it came from (its receive
count), so that a handle from an earlier receive cannot delete or move a
message received again since. It is bound to the queue's incarnation (its
uid) by a keyed digest: a handle of another queue, of a purged or re-created
one, or a string that was never a handle is refused as malformed. Any node
can read one; no node keeps them.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import struct
from dataclasses import dataclass

__all__ = ["Receipt", "read_receipt"]

_VERSION = 1
_BODY = struct.Struct(">BqIQ")  # version, message id, receive count, received at (ms)
_TAG_BYTES = 10


@dataclass(frozen=True, slots=True)
class Receipt:
    """One delivery of one message: its id, which receive it was, and when."""

    message_id: int
    receive_count: int
    received_ms: int

    @property
    def delivery(self) -> tuple[int, int]:
        """``(message id, receive count)``: the delivery this receipt names."""
        return self.message_id, self.receive_count

    def handle(self, queue_uid: str) -> str:
        """The opaque handle, bound to the queue's uid."""
        body = _BODY.pack(_VERSION, self.message_id, self.receive_count, self.received_ms)
        return base64.urlsafe_b64encode(body + _tag(queue_uid, body)).decode().rstrip("=")


def read_receipt(handle: object, queue_uid: str) -> Receipt | None:
    """The receipt a handle of this queue carries; None when it is not one."""
    if not isinstance(handle, str) or not 0 < len(handle) <= 1024:
        return None
    try:
        raw = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4))
    except (binascii.Error, ValueError):
        return None
    body, tag = raw[: _BODY.size], raw[_BODY.size :]
    if len(raw) != _BODY.size + _TAG_BYTES or tag != _tag(queue_uid, body):
        return None
    version, message_id, count, received_ms = _BODY.unpack(body)
    if version != _VERSION:
        return None
    return Receipt(message_id, count, received_ms)


def _tag(queue_uid: str, body: bytes) -> bytes:
    digest = _keyed(queue_uid).copy()  # a copy of the keyed state: cheaper than keying
    digest.update(body)
    return digest.digest()


@functools.lru_cache(maxsize=1024)
def _keyed(queue_uid: str) -> hashlib.blake2b:
    return hashlib.blake2b(key=queue_uid.encode()[:64], digest_size=_TAG_BYTES)
