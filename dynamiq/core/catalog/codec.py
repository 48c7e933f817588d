"""How a queue's record is kept in the store: JSON, read back by any release of the
cluster (what a newer one added is left aside), and its version told from the
record without decoding its settings (a whole read of the catalog skips what
did not change)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import msgspec

from dynamiq.models import QueueRecord, QueueSettings

__all__ = ["decode_queue", "encode_queue", "same_version"]

_SETTINGS = frozenset(f.name for f in dataclasses.fields(QueueSettings))


def encode_queue(record: QueueRecord) -> bytes:
    """The stored form of a queue's record (its name is the key's)."""
    return json.dumps(
        {
            "uid": record.uid,
            "settings": record.settings.to_dict(),
            "created_ms": record.created_ms,
            "modified_ms": record.modified_ms,
        }
    ).encode()


class _Stored(msgspec.Struct):
    """A stored record, its settings left as they were written."""

    uid: str
    settings: msgspec.Raw
    created_ms: int = 0
    modified_ms: int = 0


_stored = msgspec.json.Decoder(_Stored).decode
_parsed: dict[bytes, QueueSettings] = {}  # settings as written -> parsed (most are shared)
PARSED_SETTINGS = 1000  # distinct settings kept parsed, at most


def decode_queue(name: str, raw: bytes) -> QueueRecord:
    """The record of queue ``name`` stored as ``raw``."""
    stored = _stored(raw)
    written = bytes(stored.settings)
    settings = _parsed.get(written)
    if settings is None:
        settings = _settings(json.loads(written))
        if len(_parsed) < PARSED_SETTINGS:
            _parsed[written] = settings
    return QueueRecord(name, stored.uid, settings, stored.created_ms, stored.modified_ms)


def _settings(written: dict[str, Any]) -> QueueSettings:
    # What a newer release added is left aside: the two serve together while a
    # rolling upgrade goes through the cluster.
    settings = {k: v for k, v in written.items() if k in _SETTINGS}
    # A queue kept before deduplication scopes were settings deduplicated a grouped
    # message's id within its group, and claimed it so: it goes on doing so.
    settings.setdefault("dedup_scope", "group")
    return QueueSettings(**settings)


class _Version(msgspec.Struct):
    """What tells one version of a queue's record from another: a purge gives it a new
    uid, every other change a later ``modified_ms``."""

    uid: str
    modified_ms: int = 0


_version = msgspec.json.Decoder(_Version).decode


def same_version(known: QueueRecord | None, raw: bytes) -> QueueRecord | None:
    """``known`` when ``raw`` is the same version of its record (None otherwise)."""
    if known is None:
        return None
    try:
        version = _version(raw)
    except msgspec.MsgspecError:
        return None
    return known if (version.uid, version.modified_ms) == (known.uid, known.modified_ms) else None
