"""A worker's link to the store's writer process (``server``).

``RemoteWriter.write`` sends one write and waits for its commit. The writes a
worker makes in one turn of its event loop leave in one send; the answer
arrives on the event loop like any socket's data, so no thread hands a
result over. No writer answering (none yet, or the last one killed), the
next write starts one and connects to it; the writes a lost writer had not
answered fail with 503 and Retry-After.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any, cast

from dynamiq.errors import BackendUnavailable
from dynamiq.storage.lmdb.wire import LOG_FILE, address, frame, frames, raised

__all__ = ["RemoteWriter"]

log = logging.getLogger("dynamiq.storage")

START_SECONDS = 15.0  # how long a new writer may take to answer
RETRY_AFTER = 1
# After a lost link, or a link to another's writer: one this process started has ended
# by then (killed, or left at once, finding the lock held) and is reaped.
REAP_SECONDS = 1.0


class _Link(asyncio.Protocol):
    """The connection: frames out, once per turn of the loop; answers in."""

    def __init__(self, owner: RemoteWriter) -> None:
        self._owner = owner
        self._inbox = bytearray()
        self._outbox: list[bytes] = []
        self.transport: asyncio.Transport | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is none of asyncio's

    def send(self, data: bytes) -> None:
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append(data)

    def _flush(self) -> None:
        if self.transport is not None and not self.lost:
            self.transport.write(b"".join(self._outbox))
        self._outbox.clear()

    def data_received(self, data: bytes) -> None:
        self._inbox += data
        for reply in frames(self._inbox):
            self._owner.answered(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._owner.link_lost(self)


class RemoteWriter:
    """Sends writes to the writer process of the store in ``path`` (started with
    ``argv`` where none answers)."""

    def __init__(self, path: Path, argv: list[str]) -> None:
        self._address = address(path)
        self._argv = [
            sys.executable,
            "-m",
            "dynamiq.storage.lmdb.server",
            str(path),
            *argv,
        ]
        self._log = path / LOG_FILE
        self._link: _Link | None = None
        self._connecting = asyncio.Lock()
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self.commits = 0
        self.commit_seconds = 0.0

    async def write(self, op: str, args: tuple[Any, ...], adds: int) -> Any:
        """Have the writer apply ``op`` in its next commit; its result once committed.

        Raises:
            BackendUnavailable: the writer did not answer (503).
        """
        link = self._link if self._link is not None and not self._link.lost else None
        if link is None:
            link = await self._connect()
        rid = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = future
        link.send(frame((rid, op, args, adds)))
        return await future

    def answered(self, reply: tuple[int, bool, Any, int, float]) -> None:
        rid, ok, value, self.commits, self.commit_seconds = reply
        future = self._waiting.pop(rid, None)
        if future is None or future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(raised(value))

    def link_lost(self, link: _Link) -> None:
        if link is not self._link:
            return
        self._link = None
        _reap_soon()  # the writer may have been this process's child: no zombie of it
        waiting, self._waiting = self._waiting, {}
        if waiting:
            log.warning("the store's writer went away with %d writes unanswered", len(waiting))
        for future in waiting.values():
            if not future.done():
                future.set_exception(
                    BackendUnavailable(
                        "the store's writer stopped before answering: retry",
                        retry_after=RETRY_AFTER,
                    )
                )

    async def close(self) -> None:
        """Close the link (the writer goes on for the node's other processes)."""
        if self._link is not None and self._link.transport is not None:
            self._link.transport.close()

    async def _connect(self) -> _Link:
        async with self._connecting:
            if self._link is not None and not self._link.lost:
                return self._link
            loop = asyncio.get_running_loop()
            deadline = loop.time() + START_SECONDS
            pause, started = 0.005, False
            while True:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.setblocking(False)
                try:  # connected here: not every loop takes an abstract address
                    sock.connect(self._address)
                    _, link = await loop.create_unix_connection(lambda: _Link(self), sock=sock)
                except OSError as exc:
                    sock.close()
                    if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT, errno.EAGAIN):
                        raise BackendUnavailable(f"cannot reach the store's writer: {exc}") from exc
                    if loop.time() > deadline:
                        raise BackendUnavailable(
                            "the store's writer does not answer", retry_after=RETRY_AFTER
                        ) from exc
                    if not started:
                        await self._start()
                        started = True
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 0.2)
                    continue
                self._link = link
                _reap_soon()  # the one this process started may have found the lock held
                return link

    async def _start(self) -> None:
        """Start a writer (it leaves at once if another holds the store's lock)."""
        log.info("starting the store's writer process (its log: %s)", self._log)
        try:
            await asyncio.to_thread(_spawn, self._argv, self._log)
        except OSError as exc:
            log.error("cannot start the store's writer process: %s", exc)


# The writers this process started (their pids), reaped once they end. No ``Popen``:
# one still running when this process exits is no error (it serves the others).
_CHILDREN: set[int] = set()


def _reap() -> None:
    """Reap the writers this process started that have ended (no zombie is left)."""
    for pid in list(_CHILDREN):
        try:
            running = os.waitpid(pid, os.WNOHANG)[0] == 0
        except ChildProcessError:  # reaped already
            running = False
        if not running:
            _CHILDREN.discard(pid)


def _reap_soon() -> None:
    """Reap, ``REAP_SECONDS`` from now, the writers this process started that ended."""
    if _CHILDREN:
        asyncio.get_running_loop().call_later(REAP_SECONDS, _reap)


def _spawn(argv: list[str], log_file: Path) -> None:
    _reap()
    appended = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    _CHILDREN.add(
        os.posix_spawn(
            argv[0],
            argv,
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, str(log_file), appended, 0o644),
                (os.POSIX_SPAWN_DUP2, 1, 2),
            ],
        )
    )
