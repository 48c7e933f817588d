"""A backup of the embedded store while its node serves: LMDB's own copy, compacted,
through one read transaction.

The copy holds exactly what was committed when its transaction began: every
message acknowledged before the backup started is in it, whatever the node
does meanwhile (LMDB's readers never block its writer, nor the other way).
The node's lease journal is not copied: a node started on the copy offers
every message again at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import lmdb

from dynamiq.errors import ConfigError
from dynamiq.storage.lmdb.ops import stored_total, unused_bytes

__all__ = ["Held", "backup", "held_in"]

DATA_FILE = "data.mdb"
_QUEUE_PREFIX = b"q/"
_DBS = (b"messages", b"counts", b"meta", b"claims")
PROGRESS_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class Held:
    """What a store holds: its queues, their messages, its data file's bytes, and the
    bytes of that file's pages free for reuse."""

    queues: int
    messages: int
    bytes: int
    free: int = 0


def _open(path: Path) -> lmdb.Environment:
    if not (path / DATA_FILE).is_file():
        raise ConfigError(f"no LMDB store at {path} (no {DATA_FILE})")
    try:
        return lmdb.open(str(path), readonly=True, max_dbs=8, subdir=True, lock=True)
    except lmdb.Error as exc:
        raise ConfigError(f"cannot open the LMDB store at {path}: {exc}") from exc


def held_in(path: Path) -> Held:
    """Count what the store at ``path`` holds."""
    env = _open(path)
    try:
        with env.begin() as txn:
            try:
                dbs = {name: env.open_db(name, txn=txn, create=False) for name in _DBS}
            except lmdb.NotFoundError:  # a store no node has written to yet
                return Held(0, 0, (path / DATA_FILE).stat().st_size)
            queues = 0
            cursor = txn.cursor(db=dbs[b"meta"])
            if cursor.set_range(_QUEUE_PREFIX):
                for key in cursor.iternext(values=False):
                    if not key.startswith(_QUEUE_PREFIX):
                        break
                    queues += 1
            messages = stored_total(txn, dbs[b"counts"])
            free = unused_bytes(env, txn, dbs.values())
    finally:
        env.close()
    return Held(queues, messages, (path / DATA_FILE).stat().st_size, free)


def backup(source: Path, dest: Path, progress: Callable[[int, int], None] | None = None) -> Held:
    """Copy the store at ``source`` into the directory ``dest`` (made if need be; it
    must hold no store yet), compacted; return what the copy holds.

    ``progress(copied, total)`` is called now and then with the bytes written
    so far and about how many the copy will take.
    """
    target = dest / DATA_FILE
    if target.exists():
        raise ConfigError(f"{target} exists already: back up into a new directory")
    dest.mkdir(parents=True, exist_ok=True)
    env = _open(source)
    try:
        stat, info = env.stat(), env.info()
        total = (info["last_pgno"] + 1) * stat["psize"]
        failed: list[BaseException] = []

        def copy() -> None:
            try:
                env.copy(str(dest), compact=True)
            except lmdb.Error as exc:
                failed.append(exc)

        worker = threading.Thread(target=copy, name="lmdb-backup")
        worker.start()
        while worker.is_alive():
            worker.join(PROGRESS_SECONDS)
            if progress is not None and target.exists():
                progress(target.stat().st_size, total)
        if failed:
            raise ConfigError(f"the backup of {source} failed: {failed[0]}")
    finally:
        env.close()
    held = held_in(dest)
    if progress is not None:
        progress(held.bytes, held.bytes)
    return held
