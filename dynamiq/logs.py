"""Every logger Dynamiq uses, named in one place; only the CLI configures handlers."""

from __future__ import annotations

import logging

__all__ = ["LOGGERS", "configure"]

LOGGERS = ("dynamiq.api", "dynamiq.cluster", "dynamiq.core", "dynamiq.daemon", "dynamiq.storage")

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure(level: str) -> None:
    """Send every Dynamiq logger to stderr at ``level`` (debug, info, warn, error)."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in LOGGERS:
        logging.getLogger(name).setLevel(_LEVELS[level.lower()])
