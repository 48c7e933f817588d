"""The store's format: which layout of records, settings and claims it holds.

A store says its format in its configuration (``dynamiq/format``). A node
marks a store that says none (a fresh one, or one written before stores said
their format: the same layout) with its own, opens a store of an older format
after migrating it (``MIGRATIONS``: none yet; a migration would write a backup
first), and refuses a store of a newer format, naming both, rather than
misread what a newer release wrote.

Format 1: records are ``records.VERSION`` 1 (a header, optional metadata, the
body), queues and topics are JSON under ``q/``, ``t/``, ``s/``, claims hold a
13-digit expiry and their value.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from dynamiq.errors import ConfigError
from dynamiq.storage.base import StorageBackend

__all__ = ["FORMAT", "FORMAT_KEY", "MIGRATIONS", "claim_format"]

FORMAT = 1
FORMAT_KEY = "dynamiq/format"
# From a format to the next: what upgrades a store in place.
MIGRATIONS: dict[int, Callable[[StorageBackend], Awaitable[None]]] = {}


async def claim_format(store: StorageBackend, where: str) -> int:
    """Make sure this release can read the store at ``where``; return its format.

    Raises:
        ConfigError: the store is of a newer format than this release reads.
    """
    await store.meta_create(FORMAT_KEY, str(FORMAT).encode())
    found = int(await store.meta_get(FORMAT_KEY) or FORMAT)
    if found > FORMAT:
        raise ConfigError(
            f"{where}: the store is of format {found}, newer than this release of Dynamiq "
            f"reads ({FORMAT}): run the release that wrote it, or a newer one"
        )
    while found < FORMAT:
        await MIGRATIONS[found](store)
        found += 1
        await store.meta_put({FORMAT_KEY: str(found).encode()})
    return found
