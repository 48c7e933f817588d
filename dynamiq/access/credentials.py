"""AWS-style credentials: access key ids, their secrets sealed at rest, and accounts.

A key made with ``--aws`` carries an access key id (``AKIA`` and 16 more of
A-Z and 2-7, 20 in all, as AWS's) and a secret access key (40 characters of
base64's alphabet). SigV4 signs with the raw secret (an HMAC key), so it
cannot be kept only as a hash like a key's own secret: it is sealed with
AES-256-GCM under the cluster's sealing key, the access key id bound in as
associated data so that a sealed secret cannot be moved to another id.

The sealing key is kept in the store's configuration, made by the first node
to ask, as the cluster's SNS signing key is. ``rotate`` makes a new one and
keeps the one before; a node unseals with whichever sealed a secret (its id
leads the sealed bytes), and the key ring seals every credential again under
the new key at once. A copy of the store taken before a rotation holds only
the keys of its time.

Each application is an AWS account: a stable 12-digit id derived from its
name, so that every node agrees on it without asking, and two applications'
queues of the same name have different ARNs and URLs.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import secrets
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from dynamiq.storage.base import StorageBackend

__all__ = [
    "ACCESS_KEY_ID",
    "Sealer",
    "account_of",
    "new_credential",
    "rotate_sealing_key",
    "sealer_of",
]

ACCESS_KEY_ID = re.compile(r"AKIA[A-Z2-7]{16}")
SEALING_KEY = "aws/seal"  # where the store keeps the current key
PREVIOUS_KEY = "aws/seal-previous"  # the one before a rotation
_ID_BYTES = 8  # a sealing key's id, in hex, leads what it sealed
_NONCE = 12
_SECRET_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


def new_credential() -> tuple[str, str]:
    """Return a fresh access key id and its secret access key."""
    key_id = "AKIA" + "".join(secrets.choice(_BASE32) for _ in range(16))
    secret = "".join(secrets.choice(_SECRET_ALPHABET) for _ in range(40))
    return key_id, secret


@functools.lru_cache(maxsize=4096)
def account_of(application: str) -> str:
    """The 12-digit account of ``application``: the same on every node, for ever."""
    digest = hashlib.sha256(f"dynamiq application {application}".encode()).digest()
    return f"{int.from_bytes(digest[:8], 'big') % 10**12:012d}"


@dataclass(frozen=True, slots=True)
class _Key:
    key_id: str
    key: bytes

    @classmethod
    def make(cls) -> _Key:
        return cls(secrets.token_hex(_ID_BYTES), AESGCM.generate_key(bit_length=256))

    def encode(self) -> bytes:
        return json.dumps({"id": self.key_id, "key": base64.b64encode(self.key).decode()}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> _Key:
        data = json.loads(raw)
        return cls(data["id"], base64.b64decode(data["key"]))


class Sealer:
    """Seals secrets under the cluster's current sealing key; unseals under it or the
    one before."""

    def __init__(self, current: _Key, previous: _Key | None = None) -> None:
        self._current = current
        self._keys = {k.key_id: k for k in (previous, current) if k is not None}

    @property
    def key_id(self) -> str:
        """The id of the key this sealer seals with."""
        return self._current.key_id

    def seal(self, access_key_id: str, secret: str) -> bytes:
        """``secret`` sealed under the current key, bound to ``access_key_id``."""
        nonce = secrets.token_bytes(_NONCE)
        sealed = AESGCM(self._current.key).encrypt(nonce, secret.encode(), access_key_id.encode())
        return bytes.fromhex(self._current.key_id) + nonce + sealed

    def sealed_with(self, sealed: bytes) -> str:
        """The id of the key that sealed ``sealed``."""
        return sealed[:_ID_BYTES].hex()

    def unseal(self, access_key_id: str, sealed: bytes) -> str | None:
        """The secret ``sealed`` holds; None when no key this sealer has sealed it for
        ``access_key_id`` (another id's, tampered with, or under a key long rotated out)."""
        key = self._keys.get(self.sealed_with(sealed))
        if key is None:
            return None
        nonce, body = sealed[_ID_BYTES : _ID_BYTES + _NONCE], sealed[_ID_BYTES + _NONCE :]
        try:
            return AESGCM(key.key).decrypt(nonce, body, access_key_id.encode()).decode()
        except InvalidTag:
            return None


async def sealer_of(store: StorageBackend) -> Sealer:
    """A sealer with the cluster's sealing keys (the current one made by the first node
    to ask)."""
    if await store.meta_get(SEALING_KEY) is None:
        await store.meta_create(SEALING_KEY, _Key.make().encode())  # one node wins
    raw = await store.meta_get(SEALING_KEY)
    assert raw is not None  # made just now, or before
    previous = await store.meta_get(PREVIOUS_KEY)
    return Sealer(_Key.decode(raw), None if previous is None else _Key.decode(previous))


async def rotate_sealing_key(store: StorageBackend) -> Sealer:
    """Make the cluster a new sealing key; the current one becomes the previous (the
    secrets it sealed are still read until they are sealed again)."""
    current = await store.meta_get(SEALING_KEY)
    entries = {SEALING_KEY: _Key.make().encode()}
    if current is not None:
        entries[PREVIOUS_KEY] = current
    await store.meta_put(entries)
    return await sealer_of(store)
