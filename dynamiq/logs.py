"""Every logger Dynamiq uses, named in one place; only the CLI configures handlers."""

from __future__ import annotations

import logging
import time

from aiohttp.http_exceptions import HttpProcessingError

__all__ = ["LOGGERS", "MalformedRequests", "configure", "label_process"]

LOGGERS = (
    "dynamiq.api",
    "dynamiq.cluster",
    "dynamiq.core",
    "dynamiq.process.daemon",
    "dynamiq.service",
    "dynamiq.storage",
    "dynamiq.process.supervisor",
    "dynamiq.process.tls",
)
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


class MalformedRequests(logging.Filter):
    """Turn aiohttp's traceback per malformed request into one warning line per interval.

    A malformed request (a NUL in a header, an oversized URL) is answered 400
    by aiohttp, which then logs an ERROR with a traceback: noise an attacker
    controls. Other records pass unchanged.
    """

    def __init__(self, interval: float = 10.0) -> None:
        super().__init__()
        self._interval = interval
        self._next = 0.0
        self._dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep at most one line per interval for malformed requests, without traceback."""
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        now = time.monotonic()
        if now < self._next:
            self._dropped += 1
            return False
        record.msg = "malformed requests answered 400 (%d more since the last line): %s"
        record.args = (self._dropped, exc.message)
        record.exc_info, record.exc_text, record.levelno = None, None, logging.WARNING
        record.levelname = "WARNING"
        self._next, self._dropped = now + self._interval, 0
        return True


def configure(level: str) -> None:
    """Send every Dynamiq logger to stderr at ``level`` (debug, info, warn, error)."""
    logging.basicConfig(format=FORMAT)
    for name in LOGGERS:
        logging.getLogger(name).setLevel(_LEVELS[level.lower()])
    logging.getLogger("aiohttp.server").addFilter(MalformedRequests())


def label_process(label: str) -> None:
    """Tell this process's lines from its siblings' (a node's worker: its member name)."""
    for handler in logging.getLogger().handlers:
        handler.setFormatter(logging.Formatter(FORMAT.replace("%(name)s", f"{label} %(name)s")))
