"""Application keys: kept hashed in the store's configuration, checked once, then fast.

A key is ``<key_id>.<secret>``. The store holds, under ``k/<key_id>``, the
key's application, role and limits and a salted scrypt hash of its secret;
the secret itself is shown once, when the key is made. A node checks a key
the first time it sees it with scrypt (tens of milliseconds, in a thread),
and afterwards by a SHA-256 of it kept in memory; a reload that no longer
finds the key (revoked on any node) forgets that too.

A key made with an AWS credential (``KeySpec.aws``) also holds an access key
id and its secret, sealed under the cluster's sealing key (``credentials``):
SigV4 needs the secret itself. The ring unseals a secret the first time a
signature names its id, and forgets it with the key.

When a key was last used is written to ``ku/<key_id>`` at most once a
minute per node: ``last_used`` is to the minute.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from dynamiq.access.credentials import Sealer, new_credential, rotate_sealing_key, sealer_of
from dynamiq.core.clock import Clock, MonotonicClock
from dynamiq.errors import BackendUnavailable, Invalid, NotFound
from dynamiq.models import APPLICATION_PATTERN
from dynamiq.storage.base import StorageBackend

__all__ = [
    "KEY_ID",
    "MAX_DESCRIPTION",
    "ROLES",
    "KeyNotFound",
    "KeyRecord",
    "KeyRing",
    "KeySpec",
    "MadeKey",
    "new_secret",
]

ROLES = ("admin", "monitor", "manage", "produce-consume", "produce", "consume")
KEY_ID = re.compile(r"dq[0-9a-f]{16}")
# scrypt with 16 MiB of memory: about 50 ms a check on one core.
_SCRYPT = {"n": 1 << 14, "r": 8, "p": 1, "dklen": 32, "maxmem": 64 << 20}
_SCRYPT_AT_ONCE = 2  # checks running together (each takes 16 MiB)
LAST_USED_EVERY_MS = 60_000
MAX_DESCRIPTION = 256


class KeyNotFound(NotFound):
    """Raised when a key id names no key (never made, or revoked)."""

    code = "KEY_NOT_FOUND"

    def __init__(self, key_id: str) -> None:
        super().__init__(f"key {key_id!r} does not exist")


@dataclass(frozen=True, slots=True)
class KeySpec:
    """A key to make: the application (namespace) it reaches, its role, what it is
    for, and the requests a second it may make (None: no limit of its own)."""

    application: str
    role: str
    description: str = ""
    requests_per_second: float | None = None
    aws: bool = False  # with an AWS credential (an access key id and its secret)

    def check(self) -> None:
        """Raise ``Invalid`` naming the first field a key cannot have."""
        if not APPLICATION_PATTERN.fullmatch(self.application):
            raise Invalid(
                f"application {self.application!r} must be 1-40 of a-z, 0-9, _ and -, "
                "starting with a letter or digit",
                "application",
            )
        if self.role not in ROLES:
            raise Invalid(f"role must be one of {', '.join(ROLES)}", "role")
        if len(self.description) > MAX_DESCRIPTION:
            raise Invalid(f"description is longer than {MAX_DESCRIPTION} characters", "description")
        rate = self.requests_per_second
        if rate is not None and not 0 < rate <= 1e9:
            raise Invalid("requests_per_second must be > 0", "requests_per_second")


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """A key as stored: what it may do, and the hash its secret must match."""

    key_id: str
    application: str
    role: str
    description: str
    created_ms: int
    salt: bytes
    digest: bytes
    requests_per_second: float | None = None  # on each node; None: no limit
    access_key_id: str | None = None  # its AWS credential's id; None: it has none
    sealed: bytes | None = None  # that credential's secret, sealed

    def encode(self) -> bytes:
        data: dict[str, Any] = {
            "application": self.application,
            "role": self.role,
            "description": self.description,
            "created_ms": self.created_ms,
            "salt": self.salt.hex(),
            "scrypt": self.digest.hex(),
            "requests_per_second": self.requests_per_second,
        }
        if self.access_key_id is not None and self.sealed is not None:
            data["aws"] = {"id": self.access_key_id, "sealed": self.sealed.hex()}
        return json.dumps(data).encode()

    @classmethod
    def decode(cls, key_id: str, raw: bytes) -> KeyRecord:
        data: dict[str, Any] = json.loads(raw)
        aws = data.get("aws") or {}
        return cls(
            key_id,
            data["application"],
            data["role"],
            data.get("description", ""),
            data.get("created_ms", 0),
            bytes.fromhex(data["salt"]),
            bytes.fromhex(data["scrypt"]),
            data.get("requests_per_second"),
            aws.get("id"),
            bytes.fromhex(aws["sealed"]) if "sealed" in aws else None,
        )


@dataclass(frozen=True, slots=True)
class MadeKey:
    """A key just made, with what is shown this once: the whole key
    (``<key_id>.<secret>``) and its AWS credential's secret, if it has one."""

    record: KeyRecord
    token: str
    aws_secret: str | None = None


def new_secret() -> str:
    """Return a fresh secret: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


def _scrypt(secret: str, salt: bytes) -> bytes:
    return hashlib.scrypt(secret.encode(), salt=salt, **_SCRYPT)


def _fast(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class KeyRing:
    """The cluster's keys as this node knows them, and the ones it has checked."""

    def __init__(
        self,
        store: StorageBackend,
        clock: Clock | None = None,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self._store = store
        self._clock = clock or MonotonicClock()
        self._keys: dict[str, KeyRecord] = {}
        self._checked: dict[str, bytes] = {}  # key id -> SHA-256 of the whole key
        self._used: dict[str, int] = {}  # key id -> last use seen here (epoch ms)
        self._written: dict[str, int] = {}  # key id -> last use written to the store
        self._stored_use: dict[str, int] = {}  # key id -> last use the store holds
        self._by_access: dict[str, str] = {}  # AWS access key id -> key id
        self._secrets: dict[str, str] = {}  # AWS access key id -> its secret, unsealed
        self._sealer: Sealer | None = None  # read at the first reload
        self._at_once = asyncio.Semaphore(_SCRYPT_AT_ONCE)
        # Called after every change made here (the cluster tells its peers).
        self.on_change = on_change

    # -- reading -------------------------------------------------------------

    def records(self) -> list[KeyRecord]:
        """Return every key, oldest first."""
        return sorted(self._keys.values(), key=lambda r: (r.created_ms, r.key_id))

    def last_used_ms(self, key_id: str) -> int:
        """When the key was last used, to the minute (0: never)."""
        return max(self._used.get(key_id, 0), self._stored_use.get(key_id, 0))

    def checked(self, token: str) -> KeyRecord | None:
        """Return the key ``token`` is, if this node has checked it before; else None."""
        key_id = token.partition(".")[0]
        digest = self._checked.get(key_id)
        if digest is None or not hmac.compare_digest(digest, _fast(token)):
            return None
        return self._used_now(self._keys[key_id])

    async def verify(self, token: str) -> KeyRecord | None:
        """Check ``token`` with scrypt (for a key ``checked`` does not know yet); return
        the key it is, or None when it is no key (wrong, revoked)."""
        key_id, dot, secret = token.partition(".")
        record = self._keys.get(key_id)
        if not dot or record is None:
            return None
        async with self._at_once:
            digest = await asyncio.to_thread(_scrypt, secret, record.salt)
        if not hmac.compare_digest(digest, record.digest) or self._keys.get(key_id) != record:
            return None
        self._checked[key_id] = _fast(token)
        return self._used_now(record)

    def signing(self, access_key_id: str) -> tuple[KeyRecord, str] | None:
        """The key whose AWS credential ``access_key_id`` is, and that credential's
        secret; None for an id no key has (never made, or revoked)."""
        record = self._keys.get(self._by_access.get(access_key_id, ""))
        if record is None or record.sealed is None:
            return None
        secret = self._secrets.get(access_key_id)
        if secret is None:
            secret = self.sealer.unseal(access_key_id, record.sealed)
            if secret is None:  # sealed under a key this node has not read yet
                return None
            self._secrets[access_key_id] = secret
        return record, secret

    def used(self, record: KeyRecord) -> None:
        """Note that ``record`` was used now (a signature it made held)."""
        self._used_now(record)

    @property
    def sealer(self) -> Sealer:
        """The cluster's sealing keys (``BackendUnavailable`` until the keys are read)."""
        if self._sealer is None:
            raise BackendUnavailable("the keys have not been read yet", retry_after=1)
        return self._sealer

    def _used_now(self, record: KeyRecord) -> KeyRecord:
        self._used[record.key_id] = self._clock.wall_ms()
        return record

    # -- changing ------------------------------------------------------------

    async def create(self, spec: KeySpec) -> MadeKey:
        """Make a key; return it with what is shown only once (its secrets)."""
        spec.check()
        key_id, secret, salt = "dq" + secrets.token_hex(8), new_secret(), secrets.token_bytes(16)
        async with self._at_once:
            digest = await asyncio.to_thread(_scrypt, secret, salt)
        access_key_id, aws_secret = new_credential() if spec.aws else (None, None)
        sealed = None
        if access_key_id is not None and aws_secret is not None:
            sealed = self.sealer.seal(access_key_id, aws_secret)
        record = KeyRecord(
            key_id,
            spec.application,
            spec.role,
            spec.description,
            self._clock.wall_ms(),
            salt,
            digest,
            spec.requests_per_second,
            access_key_id,
            sealed,
        )
        await self._store.meta_put({f"k/{key_id}": record.encode()})
        self._keep(record)
        self.on_change()
        return MadeKey(record, f"{key_id}.{secret}", aws_secret)

    def _keep(self, record: KeyRecord) -> None:
        self._keys[record.key_id] = record
        if record.access_key_id is not None:
            self._by_access[record.access_key_id] = record.key_id

    async def rotate_sealing_key(self) -> str:
        """Make the cluster a new sealing key and seal every AWS secret again under it;
        return its id. The other nodes read both once they reload."""
        self._sealer = await rotate_sealing_key(self._store)
        resealed: dict[str, bytes] = {}
        for record in list(self._keys.values()):
            found = None if record.access_key_id is None else self.signing(record.access_key_id)
            if found is None:
                continue
            again = self._sealer.seal(found[0].access_key_id or "", found[1])
            fresh = dataclasses.replace(record, sealed=again)
            resealed[f"k/{record.key_id}"] = fresh.encode()
            self._keep(fresh)
        if resealed:
            await self._store.meta_put(resealed)
        self.on_change()
        return self._sealer.key_id

    async def revoke(self, key_id: str) -> None:
        """Revoke a key: refused on this node at once, on the others once they reload."""
        if key_id not in self._keys:
            raise KeyNotFound(key_id)
        await self._store.meta_delete([f"k/{key_id}", f"ku/{key_id}"])
        self._forget([key_id])
        self.on_change()

    def _forget(self, key_ids: Iterable[str]) -> None:
        for key_id in key_ids:
            record = self._keys.pop(key_id, None)
            if record is not None and record.access_key_id is not None:
                self._by_access.pop(record.access_key_id, None)
                self._secrets.pop(record.access_key_id, None)
            self._checked.pop(key_id, None)
            self._used.pop(key_id, None)
            self._written.pop(key_id, None)

    # -- upkeep --------------------------------------------------------------

    async def reload(self) -> None:
        """Read the keys the store holds now; forget the others (revoked elsewhere)."""
        self._sealer = await sealer_of(self._store)
        entries = await self._store.meta_scan("k")
        keys: dict[str, KeyRecord] = {}
        used: dict[str, int] = {}
        for name, raw in entries.items():
            kind, _, key_id = name.partition("/")
            if kind == "k" and KEY_ID.fullmatch(key_id):
                keys[key_id] = KeyRecord.decode(key_id, raw)
            elif kind == "ku" and raw.isdigit():
                used[key_id] = int(raw)
        changed = [k for k, r in self._keys.items() if keys.get(k) != r]
        self._forget(changed)
        self._keys = {}
        self._by_access = {}
        for record in keys.values():
            self._keep(record)
        self._stored_use = {k: v for k, v in used.items() if k in keys}
        await self._write_uses()

    async def _write_uses(self) -> None:
        """Write the last uses seen here that are over a minute newer than written."""
        due = {
            key_id: at
            for key_id, at in self._used.items()
            if at - self._written.get(key_id, 0) >= LAST_USED_EVERY_MS and key_id in self._keys
        }
        if not due:
            return
        await self._store.meta_put({f"ku/{k}": b"%d" % at for k, at in due.items()})
        self._written |= due
