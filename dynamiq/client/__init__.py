"""Python clients for the v2 API: ``AsyncClient`` and the blocking ``Client``."""

from dynamiq.client.aio import AsyncClient
from dynamiq.client.sync import Client

__all__ = ["AsyncClient", "Client"]
