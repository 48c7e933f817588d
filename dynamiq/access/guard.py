"""The door: who a request's key is, and whether it may call again now.

With keys on, a request names a key
(``<key_id>.<secret>``, or the administrator's key from the configuration);
a missing or wrong one is ``Unauthorized``. Wrong keys are limited per client
address: past the burst, an address gets ``TooManyRequests`` for unknown keys
without any being checked (keys this node checked before still pass, so a
neighbour's typo does not lock a working client out). A key with a rate gets
``TooManyRequests`` past it, counted on each node.

A SigV4 request (the SQS and SNS endpoint's) names a key by its AWS access key
id; a signature that does not hold counts as a wrong key from its address, and
an address past the burst is refused before its signature is checked.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from dynamiq.access.buckets import Buckets
from dynamiq.access.keys import KeyRecord, KeyRing, KeySpec, MadeKey
from dynamiq.access.roles import Principal, principal_of
from dynamiq.access.sigv4 import SignatureRefused, SignedRequest, verify
from dynamiq.core.clock import Clock, MonotonicClock
from dynamiq.errors import TooManyRequests, Unauthorized

__all__ = ["ADMIN_KEY_ID", "Guard", "KeyView"]

ADMIN_KEY_ID = "admin"  # the configured administrator's key, as metrics and logs name it


@dataclass(frozen=True, slots=True)
class KeyView:
    """A key as listed: never its secret."""

    key_id: str
    application: str
    role: str
    description: str
    created_ms: int
    last_used_ms: int
    requests_per_second: float | None
    access_key_id: str | None = None  # its AWS credential's id, if it has one


class Guard:
    """Tells callers apart and holds them to their rates."""

    def __init__(
        self,
        ring: KeyRing | None,
        admin_key: str = "",
        failed_per_second: float = 1.0,
        failed_burst: int = 20,
        clock: Clock | None = None,
        announced: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``ring`` None: keys are off (the door lets everyone in); ``announced``
        returns once the cluster's other nodes heard of the last change."""
        self._ring = ring
        self._announced = announced
        self._admin = hashlib.sha256(admin_key.encode()).digest() if admin_key else None
        self._clock = clock or MonotonicClock()
        self._failed = Buckets(failed_per_second, failed_burst)
        self._rates: dict[str, Buckets] = {}

    @property
    def enabled(self) -> bool:
        """Whether requests need keys."""
        return self._ring is not None

    @property
    def ring(self) -> KeyRing:
        """The keys (only when they are on)."""
        assert self._ring is not None, "keys are off"
        return self._ring

    async def identify(self, token: str | None, source: str) -> Principal:
        """Return who ``token`` is, from the client address ``source``.

        Raises:
            Unauthorized: no key, or a wrong or revoked one.
            TooManyRequests: ``source`` sent too many wrong keys lately.
        """
        ring = self.ring
        if not token:
            raise Unauthorized("this node needs a key: send Authorization: Bearer <key>")
        if self._admin is not None and hmac.compare_digest(
            hashlib.sha256(token.encode()).digest(), self._admin
        ):
            return Principal(ADMIN_KEY_ID, "admin")
        record = ring.checked(token)
        if record is None:
            now = self._held_back(source, "wrong keys")
            record = await ring.verify(token)
            if record is None:
                self._failed.take(source, now)
                raise Unauthorized("the key is wrong or was revoked")
        return self._admitted(record)

    def identify_signed(
        self,
        request: SignedRequest,
        source: str,
        *,
        region: str,
        services: tuple[str, ...],
        max_skew: float,
        presigned: bool,
    ) -> Principal:
        """Return who signed ``request`` (SigV4), from the client address ``source``.

        Raises:
            SignatureRefused: the signature does not let it in (AWS's code and words).
            TooManyRequests: ``source`` sent too many failing signatures lately.
        """
        ring = self.ring
        now = self._held_back(source, "failing signatures")
        found: list[KeyRecord] = []

        def secret_of(access_key_id: str) -> str | None:
            signing = ring.signing(access_key_id)
            if signing is None:
                return None
            found.append(signing[0])
            return signing[1]

        try:
            verify(
                request,
                secret_of,
                region=region,
                services=services,
                now=self._clock.wall_ms() / 1000,
                max_skew=max_skew,
                presigned=presigned,
            )
        except SignatureRefused:
            self._failed.take(source, now)
            raise
        ring.used(found[0])
        return self._admitted(found[0])

    def _held_back(self, source: str, what: str) -> float:
        """Refuse ``source`` while it is past its burst of failures; else return now."""
        now = self._clock.now()
        wait = self._failed.waiting(source, now)
        if wait:
            raise TooManyRequests(
                f"too many {what} from {source}; wait before trying again", math.ceil(wait)
            )
        return now

    def _admitted(self, record: KeyRecord) -> Principal:
        rate = record.requests_per_second
        if rate is not None:
            buckets = self._rates.get(record.key_id)
            if buckets is None:
                buckets = self._rates[record.key_id] = Buckets(rate, max(1.0, rate))
            wait = buckets.take(None, self._clock.now())
            if wait:
                raise TooManyRequests(
                    f"key {record.key_id} is limited to {rate:g} requests per second",
                    math.ceil(wait),
                )
        return principal_of(record.key_id, record.role, record.application)

    # -- keys ---------------------------------------------------------------

    def listed(self) -> list[KeyView]:
        """Return every key, oldest first."""
        return [self._view(r) for r in self.ring.records()]

    def _view(self, record: KeyRecord) -> KeyView:
        return KeyView(
            record.key_id,
            record.application,
            record.role,
            record.description,
            record.created_ms,
            self.ring.last_used_ms(record.key_id),
            record.requests_per_second,
            record.access_key_id,
        )

    async def create_key(self, spec: KeySpec) -> tuple[KeyView, MadeKey]:
        """Make a key; return it and what is shown once (its secrets)."""
        made = await self.ring.create(spec)
        await self._told()
        return self._view(made.record), made

    async def rotate_sealing_key(self) -> str:
        """Seal every AWS secret under a new cluster key; return its id once every node
        that answers reads it."""
        key_id = await self.ring.rotate_sealing_key()
        await self._told()
        return key_id

    async def revoke_key(self, key_id: str) -> None:
        """Revoke a key; return once every node that answers refuses it."""
        await self.ring.revoke(key_id)
        self._rates.pop(key_id, None)
        await self._told()

    async def _told(self) -> None:
        if self._announced is not None:
            await self._announced()
