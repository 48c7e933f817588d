"""The catalog (``Catalog``): queues, topics and subscriptions, kept in the store and
cached in memory by every process.

- ``catalog``: the face the engine and the application layer call;
- ``log``: every change numbered, so a process that missed one reads it again;
- ``news``: what a change touched, told to the other processes;
- ``index``, ``topics``: the queues and topics a process knows, indexed for upkeep;
- ``codec``: a queue's record as the store keeps it.
"""

from dynamiq.core.catalog.catalog import Catalog

__all__ = ["Catalog"]
