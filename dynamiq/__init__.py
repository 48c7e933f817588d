"""Dynamiq: a distributed data-bag queue daemon."""

__version__ = "0.1.0"
