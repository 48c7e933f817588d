"""How a setting's value is checked: a rule that must hold, and secrets given inline or
in a file (strong enough either way)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from dynamiq.errors import ConfigError

__all__ = [
    "MIN_SECRET_BYTES",
    "read_secret",
    "require",
    "require_networks",
    "require_one_secret",
]

MIN_SECRET_BYTES = 32


def require_one_secret(secret: str, key: str, path: str, path_key: str) -> None:
    """Refuse a secret given both inline (``key``) and as a file (``path_key``), and an
    inline one too weak (a file's is checked when it is read)."""
    require(not (secret and path), path_key, f"give either {key} or {path_key}, not both")
    if secret:
        _require_strong(secret, key)


def read_secret(secret: str, path: str, path_key: str) -> str:
    """Return the secret given inline, or read from ``path`` when that is how it was given."""
    return _from_file(path, path_key) if path else secret


def _from_file(path: str, key: str) -> str:
    """Return the secret a file holds (surrounding whitespace dropped), if strong enough."""
    try:
        secret = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", key=key) from None
    require(bool(secret), key, "the file is empty")
    _require_strong(secret, key)
    return secret


def _require_strong(secret: str, key: str) -> None:
    """Refuse a secret that could be guessed: gossip packets are pickles checked by an
    HMAC of the cluster's secret, and the administrator's key opens everything."""
    require(
        len(secret.encode()) >= MIN_SECRET_BYTES,
        key,
        f"must be at least {MIN_SECRET_BYTES} bytes (make one with: dynamiq keys secret)",
    )


def require(ok: bool, key: str, message: str) -> None:
    """Raise ``ConfigError`` for ``key`` with ``message`` unless ``ok``."""
    if not ok:
        raise ConfigError(message, key=key)


def require_networks(networks: str, key: str) -> None:
    """Raise ``ConfigError`` unless ``networks`` is a comma-separated list of CIDRs (or
    addresses)."""
    for network in (n.strip() for n in networks.split(",")):
        if not network:
            continue
        try:
            ipaddress.ip_network(network, strict=False)
        except ValueError:
            raise ConfigError(f"{network!r} is not an address or a CIDR", key=key) from None
