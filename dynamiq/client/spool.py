"""A producer's spool: publishes no node accepted, kept on local disk until one does.

A spool is a directory owned by one producer process at a time (``lock``,
an exclusive ``flock``). ``data`` holds the waiting publish requests in the
order they were made, each framed by its length and CRC-32 and fsynced
before the publish call returns; ``acked`` holds how far ``data`` has been
sent and acknowledged. When everything is acknowledged, ``data`` is
truncated. A request a node refuses for good (a 4xx: the queue was deleted,
the message is invalid) is written to ``rejected`` as a JSON line with the
error, and the spool moves on.

A crash while appending leaves a torn last record, never acknowledged to
the caller: it is cut off when the spool is next opened. A crash after a
node acknowledged a request but before ``acked`` was written sends it again
(at-least-once; with ``dedup_id`` the queue stores it once).
"""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import json
import logging
import os
import struct
import threading
import zlib
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from dynamiq.errors import ClientError, DynamiqError

__all__ = ["DEFAULT_MAX_BYTES", "Spool", "SpoolBusy", "SpoolFull", "send_waiting"]

log = logging.getLogger("dynamiq.client")

DEFAULT_MAX_BYTES = 1 << 30
_HEADER = struct.Struct(">II")  # payload length, CRC-32 of the payload
_OFFSET = struct.Struct(">Q")


class SpoolFull(DynamiqError):
    """The spool reached its size limit: the publish is neither sent nor kept."""

    code = "SPOOL_FULL"
    status = 507


class SpoolBusy(DynamiqError):
    """Another process holds the spool."""

    code = "SPOOL_BUSY"
    status = 409


class _Entry(msgspec.Struct, array_like=True):
    path: str  # the publish route, e.g. /v2/queues/orders/messages
    payload: Any  # the publish request, as sent


class Spool:
    """The spool directory at ``path`` (created if missing), at most ``max_bytes`` of
    waiting requests. Safe to share between threads of one process."""

    def __init__(self, path: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.sending = threading.Lock()  # held by the one sender at work
        self._lock_fd = os.open(self.path / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise SpoolBusy(f"spool {self.path} is in use by another process") from None
        self._data = os.open(self.path / "data", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self._acked_fd = os.open(self.path / "acked", os.O_RDWR | os.O_CREAT, 0o644)
        _fsync_dir(self.path)
        raw = os.pread(self._acked_fd, _OFFSET.size, 0)
        self._acked = _OFFSET.unpack(raw)[0] if len(raw) == _OFFSET.size else 0
        self._end = self._recover()

    def close(self) -> None:
        """Close the files and let another process take the spool; idempotent."""
        with self._lock:
            if self._lock_fd < 0:
                return
            for fd in (self._data, self._acked_fd, self._lock_fd):
                os.close(fd)
            self._lock_fd = -1

    @property
    def pending(self) -> bool:
        """Whether requests wait to be sent."""
        return self._acked < self._end

    @property
    def size(self) -> int:
        """Bytes of requests waiting (and acknowledged ones not truncated yet)."""
        return self._end

    def append(self, path: str, payload: Any) -> None:
        """Keep a publish request durably (fsynced) behind those already waiting."""
        body = msgspec.msgpack.encode(_Entry(path, payload))
        record = _HEADER.pack(len(body), zlib.crc32(body)) + body
        with self._lock:
            if self._end + len(record) > self.max_bytes:
                raise SpoolFull(
                    f"spool {self.path} holds {self._end} bytes; this publish of "
                    f"{len(record)} more would pass its limit of {self.max_bytes}"
                )
            os.write(self._data, record)
            os.fsync(self._data)
            self._end += len(record)

    def waiting(self) -> Iterator[tuple[int, str, Any]]:
        """Yield the waiting requests in order: ``(offset after it, path, payload)``;
        ``acknowledge`` each offset once a node took the request."""
        offset = self._acked
        while offset < self._end:
            record = self._read(offset)
            assert record is not None  # recovered at open, written whole since
            entry, offset = record
            yield offset, entry.path, entry.payload

    def backlog(self) -> tuple[int, int]:
        """Return how many requests wait, and how many messages they carry."""
        waiting = [payload for _, _, payload in self.waiting()]
        return len(waiting), sum(map(_messages_in, waiting))

    def acknowledge(self, offset: int) -> None:
        """Note that every request before ``offset`` was taken; truncate ``data`` when
        nothing waits any more."""
        with self._lock:
            self._write_acked(offset)
            if offset >= self._end:
                os.ftruncate(self._data, 0)
                os.fsync(self._data)
                self._end = 0
                self._write_acked(0)

    def reject(self, path: str, payload: Any, error: str) -> None:
        """Keep a request no node will ever take in ``rejected``, with its error."""
        line = json.dumps({"path": path, "request": payload, "error": error}) + "\n"
        with open(self.path / "rejected", "a", encoding="utf-8") as out:
            out.write(line)
            out.flush()
            os.fsync(out.fileno())

    def _write_acked(self, offset: int) -> None:
        os.pwrite(self._acked_fd, _OFFSET.pack(offset), 0)  # one sector: written whole
        os.fsync(self._acked_fd)
        self._acked = offset

    def _read(self, offset: int) -> tuple[_Entry, int] | None:
        """Return the record at ``offset`` and the offset after it; None when it is
        torn or damaged."""
        header = os.pread(self._data, _HEADER.size, offset)
        if len(header) < _HEADER.size:
            return None
        length, crc = _HEADER.unpack(header)
        body = os.pread(self._data, length, offset + _HEADER.size)
        if len(body) < length or zlib.crc32(body) != crc:
            return None
        try:
            entry = msgspec.msgpack.decode(body, type=_Entry)
        except msgspec.DecodeError:
            return None
        return entry, offset + _HEADER.size + length

    def _recover(self) -> int:
        """Cut off a torn last record (a crash while appending); return the end."""
        size = os.fstat(self._data).st_size
        if self._acked > size:  # truncated after everything was acknowledged
            self._write_acked(0)
        offset = self._acked
        while offset < size and (record := self._read(offset)) is not None:
            offset = record[1]
        if offset < size:
            os.ftruncate(self._data, offset)
            os.fsync(self._data)
        return offset


def _messages_in(payload: Any) -> int:
    """How many messages a publish request carries."""
    return len(payload.get("messages", ())) if isinstance(payload, dict) else 0


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def send_waiting(
    spool: Spool,
    post: Callable[[str, Any], Awaitable[object]],
    progress: Callable[[int], None] | None = None,
) -> int:
    """Send the spool's waiting requests in order through ``post(path, payload)``;
    return how many messages were taken. Raises ``BackendUnavailable`` when no node
    takes one (it and those behind it keep waiting).

    ``progress`` is called with the messages of each request taken. One sender at
    a time: a second waits for the first.
    """
    # A thread lock (the other sender may run another thread's loop), polled so that
    # a cancelled wait leaves it as it was.
    while not spool.sending.acquire(blocking=False):  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    sent = 0
    try:
        # The files are read and written in a thread: fsyncs do not stall the loop.
        while chunk := await asyncio.to_thread(lambda: list(itertools.islice(spool.waiting(), 64))):
            for offset, path, payload in chunk:
                count = _messages_in(payload)
                try:
                    await post(path, payload)
                except ClientError as exc:  # never taken: set aside, not retried for ever
                    log.warning("spooled publish to %s refused (%s); kept in rejected", path, exc)
                    await asyncio.to_thread(spool.reject, path, payload, f"{exc.code}: {exc}")
                else:
                    sent += count
                await asyncio.to_thread(spool.acknowledge, offset)
                if progress is not None:
                    progress(count)
    finally:
        spool.sending.release()
    return sent
