"""Fixtures of the API suites."""

from tests.api.documented import spec

__all__ = ["spec"]
