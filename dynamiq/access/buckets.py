"""Token buckets: a rate with a burst, per key (a client address, an application key)."""

from __future__ import annotations

import math
from collections.abc import Hashable

__all__ = ["Buckets"]


class Buckets:
    """One token bucket per key, all with the same rate and burst (pure: times are given).

    A key's bucket starts full; taking from an empty one fails and says how long
    until a token is back. Full buckets are forgotten, so memory follows the
    keys that are being limited, not every key ever seen; at most ``max_keys``
    are kept (the fullest go first).
    """

    def __init__(self, per_second: float, burst: float, max_keys: int = 100_000) -> None:
        self._rate = per_second
        self._burst = burst
        self._max_keys = max_keys
        self._tokens: dict[Hashable, tuple[float, float]] = {}  # key -> (tokens, at)

    def level(self, key: Hashable, now: float) -> float:
        """Return the tokens ``key`` has at ``now``."""
        tokens, at = self._tokens.get(key, (self._burst, now))
        return min(self._burst, tokens + (now - at) * self._rate)

    def take(self, key: Hashable, now: float) -> float:
        """Take a token for ``key``; return 0.0, or the seconds to wait when there is none."""
        tokens = self.level(key, now)
        if tokens < 1.0:
            return self._until_one(tokens)
        self._tokens[key] = (tokens - 1.0, now)
        if len(self._tokens) > self._max_keys:
            self._trim(now)
        return 0.0

    def waiting(self, key: Hashable, now: float) -> float:
        """Return the seconds until ``key`` has a token (0.0: it has one now)."""
        return self._until_one(self.level(key, now))

    def _until_one(self, tokens: float) -> float:
        return max(0.0, 1.0 - tokens) / self._rate

    def _trim(self, now: float) -> None:
        """Forget the buckets that are full again, then the fullest, down to 90%."""
        levels = sorted(self._tokens, key=lambda k: self.level(k, now))
        keep = math.floor(self._max_keys * 0.9)
        self._tokens = {
            k: self._tokens[k] for k in levels[:keep] if self.level(k, now) < self._burst
        }
