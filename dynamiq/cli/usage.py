"""The error of a command used wrongly."""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(Exception):
    """A command used wrongly: exit status 2, with this message."""
