"""Python clients for the v2 API: ``AsyncClient`` and the blocking ``Client``, with
workers that run the receive-handle-delete loop."""

from dynamiq.client.aio import AsyncClient
from dynamiq.client.sync import Client
from dynamiq.client.worker import Retry, WorkerReport

__all__ = ["AsyncClient", "Client", "Retry", "WorkerReport"]
