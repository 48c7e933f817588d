"""TLS from ``[tls]``: the HTTP port's context and the one calls to peers use.

The server's context is one object for the life of the node: aiohttp's site
holds it, so a reload loads the new certificate into it, and every handshake
after that shows the new one while open connections go on. The peers'
context is replaced on reload (the peer client takes it per request).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable

from dynamiq.config import TlsSettings
from dynamiq.errors import ConfigError

__all__ = ["Certificates"]

log = logging.getLogger("dynamiq.process.tls")


class Certificates:
    """The node's TLS contexts, read from the files ``settings`` names."""

    def __init__(self, settings: TlsSettings) -> None:
        self._settings = settings
        self.server = _server_context(settings)
        self._peers = _peer_context(settings)

    def peer_context(self) -> ssl.SSLContext:
        """The context calls to peers use now (it changes on reload)."""
        return self._peers

    def reload(self) -> bool:
        """Read the files again; keep the old certificates if the new ones do not load.

        A certificate authority added to ``cafile`` is trusted from now on; one
        removed from it stays trusted until the node restarts.
        """
        settings = self._settings
        try:
            _server_context(settings)  # all or nothing: check the files first
            peers = _peer_context(settings)
        except ConfigError as exc:
            log.error("certificates not reloaded, the old ones stay: %s", exc)
            return False
        self.server.load_cert_chain(settings.certfile, settings.keyfile)
        if settings.cafile:
            self.server.load_verify_locations(settings.cafile)
        self._peers = peers
        log.info("certificates reloaded from %s", settings.certfile)
        return True


def _server_context(settings: TlsSettings) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    _load(context.load_cert_chain, "tls.certfile", settings.certfile, settings.keyfile)
    if settings.cafile:
        _load(context.load_verify_locations, "tls.cafile", settings.cafile)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _peer_context(settings: TlsSettings) -> ssl.SSLContext:
    """Verify peers against ``peercafile`` (the system's authorities when empty), and
    show them this node's certificate (they may require one)."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if settings.peercafile:
        _load(context.load_verify_locations, "tls.peercafile", settings.peercafile)
    _load(context.load_cert_chain, "tls.certfile", settings.certfile, settings.keyfile)
    return context


def _load(method: Callable[..., None], key: str, *paths: str) -> None:
    try:
        method(*paths)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load {', '.join(paths)}: {exc}", key=key) from None
