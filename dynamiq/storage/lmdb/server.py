"""The embedded store's writer process: one per data directory, for every process
of the node.

    python -m dynamiq.storage.lmdb.server PATH --map-size N [--limit L] [--reserve R]

With ``storage.writer = process`` no worker writes to LMDB itself. Each sends
its writes (``ops`` by name, ``wire`` frames) to this process,
which applies whatever every worker sent meanwhile in one transaction and
commits once (one fsync for the node's whole group), then answers each.
Workers read the store themselves (readers never wait on the writer), and
their event loops never hand a commit's result across the GIL.

Its life: the first worker that finds no writer starts one, as its child
(in the node's process group: a signal to the node's group reaches it). A
writer holds the directory's ``writer.lock`` (which says its pid); a second
one started meanwhile sees it held and leaves. It logs to ``writer.log`` in
the directory (never to the node's own output, which it may outlive). It
runs while any process is connected, and exits a few seconds after the last
one left (its node stopped or was killed).

Killed itself, it loses nothing acknowledged: a write is answered after its
commit, and the writes it had not answered fail in the workers with 503 and
Retry-After (they may have been committed: a retried publish may be stored
twice, at least once as ever); the next write starts a new writer.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import logging
import os
import selectors
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from dynamiq.errors import ServerError
from dynamiq.logs import configure
from dynamiq.storage.diskspace import FreeSpace
from dynamiq.storage.lmdb.ops import OPS, Trees, open_env, unused_bytes
from dynamiq.storage.lmdb.wire import address, error_of, frame, frames, is_file
from dynamiq.storage.lmdb.writer import MAX_OPS_PER_COMMIT, Committer, Gate, Write

__all__ = ["LOCK_FILE", "main"]

log = logging.getLogger("dynamiq.storage")

LOCK_FILE = "writer.lock"
IDLE_SECONDS = 3.0  # with nobody connected this long, the writer exits
READ_BYTES = 1 << 20
BULK = 8 << 20  # a write that may need this much (some 650 records) is a big one
_PEERCRED = struct.Struct("3i")  # pid, uid, gid


class _Link:
    """One connected process: what it sent not yet read whole, what it is owed."""

    __slots__ = ("inbox", "outbox", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.inbox = bytearray()
        self.outbox = bytearray()


class WriterServer:
    """Takes writes from the node's processes and commits them in groups."""

    def __init__(self, env: Any, trees: Trees, space: FreeSpace | None, sock: socket.socket):
        self._trees = trees
        self._committer = Committer(env, Gate(), space)
        self._listener = sock
        self._selector = selectors.DefaultSelector()
        self._selector.register(sock, selectors.EVENT_READ)
        self._links: dict[socket.socket, _Link] = {}
        self._pending: list[Write] = []
        # What a receive reads into: one buffer, not a new 1 MiB object (mapped and
        # unmapped by the allocator) for every read.
        self._chunk = bytearray(READ_BYTES)
        self._bulk_waited = False  # the last commit left big writes waiting
        self._alone_since = time.monotonic()
        self.stopping = False

    def run(self) -> None:
        """Serve until nobody has been connected for ``IDLE_SECONDS`` (after SIGTERM: until
        nobody is: the workers' last writes, as they stop, are still committed)."""
        while True:
            for key, mask in self._selector.select(0 if self._pending else 0.5):
                if key.fileobj is self._listener:
                    self._accept()
                    continue
                link = key.data
                if mask & selectors.EVENT_READ:
                    self._receive(link)
                if mask & selectors.EVENT_WRITE and link.sock in self._links:
                    self._send(link)
            if self._pending:
                self._commit()
            elif not self._links and (
                self.stopping or time.monotonic() - self._alone_since > IDLE_SECONDS
            ):
                break
        for link in list(self._links.values()):
            self._drop(link)

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError):
            sock, _ = self._listener.accept()
            _, uid, _ = _PEERCRED.unpack(
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
            )
            if uid != os.getuid():
                log.warning("refused a connection to the store's writer from user %d", uid)
                sock.close()
                return
            sock.setblocking(False)
            link = _Link(sock)
            self._links[sock] = link
            self._selector.register(sock, selectors.EVENT_READ, link)

    def _receive(self, link: _Link) -> None:
        chunk = self._chunk
        try:
            while size := link.sock.recv_into(chunk):
                with memoryview(chunk) as view:
                    link.inbox += view[:size]
                if size < READ_BYTES:
                    break
            else:  # the other end closed
                self._drop(link)
        except BlockingIOError:
            pass
        except OSError:
            self._drop(link)
        for request in frames(link.inbox):
            self._pending.append(self._write(link, request))

    def _write(self, link: _Link, request: tuple[int, str, tuple[Any, ...], int]) -> Write:
        rid, name, args, adds = request
        op = OPS.get(name)
        trees = self._trees

        def apply(txn: Any) -> Any:
            if op is None:
                raise ServerError(f"the store's writer has no write {name!r}")
            return op(trees, txn, *args)

        return Write(apply, adds, (link, rid))

    def _next(self) -> list[Write]:
        """The writes of the next commit: those waiting, but for the big ones (``BULK``)
        while small ones wait beside them, once: a publish is not held up by a wide
        fan-out's copies, and the copies wait one commit at most."""
        pending = self._pending
        if not self._bulk_waited and any(w.adds >= BULK for w in pending):
            small = [w for w in pending if w.adds < BULK]
            if small:
                self._bulk_waited = True
                self._pending = [w for w in pending if w.adds >= BULK]
                self._pending[:0] = small[MAX_OPS_PER_COMMIT:]
                return small[:MAX_OPS_PER_COMMIT]
        self._bulk_waited = False
        batch = pending[:MAX_OPS_PER_COMMIT]
        del pending[:MAX_OPS_PER_COMMIT]
        return batch

    def _commit(self) -> None:
        done = self._committer.commit(self._next())
        commits, seconds = self._committer.commits, self._committer.commit_seconds
        owed: dict[int, _Link] = {}
        for write, result in done:
            link, rid = write.to
            if link.sock not in self._links:
                continue  # it left: nobody to tell
            if isinstance(result, BaseException):
                link.outbox += frame((rid, False, error_of(result), commits, seconds))
            else:
                link.outbox += frame((rid, True, result, commits, seconds))
            owed[id(link)] = link
        for link in owed.values():
            self._send(link)

    def _send(self, link: _Link) -> None:
        try:
            sent = link.sock.send(link.outbox)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._drop(link)
            return
        del link.outbox[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if link.outbox else 0)
        self._selector.modify(link.sock, events, link)

    def _drop(self, link: _Link) -> None:
        if self._links.pop(link.sock, None) is None:
            return
        self._selector.unregister(link.sock)
        link.sock.close()
        if not self._links:
            self._alone_since = time.monotonic()


def serve(path: Path, map_size: int, space: FreeSpace | None) -> int:
    """Be the writer of the store in ``path`` until idle; 0 also when another is."""
    lock: TextIO = (path / LOCK_FILE).open("a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return 0  # another writer serves this store
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")  # who writes, for the operator
    lock.flush()
    env, trees = open_env(path, map_size)
    if space is not None:
        space.store_free = _free_pages(env, trees)
    where = address(path)
    file = where if is_file(where) else None
    _remove(file)  # the lock is ours: a file there is a dead writer's
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(where)
    bound = None
    if file is not None:
        os.chmod(file, 0o600)  # the user's alone (the peer's credentials are checked too)
        bound = _identity(file)
    sock.listen(256)
    sock.setblocking(False)
    server = WriterServer(env, trees, space, sock)

    def stop(*_: object) -> None:
        server.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C stops the node, whose end stops this
    try:
        server.run()
    finally:
        # Gone before the lock; but only if it is still ours, not the socket of a
        # later writer in a directory deleted and made again under this one.
        if file is not None and _identity(file) == bound:
            _remove(file)
        sock.close()
        env.close()
        lock.close()
    return 0


def _identity(file: bytes) -> tuple[int, int] | None:
    """The file's device and inode, None if it is not there."""
    try:
        found = os.stat(file)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


def _remove(file: bytes | None) -> None:
    """Remove the writer's socket file, if it listens on one and it is there."""
    if file is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(file)


def _free_pages(env: Any, trees: Trees) -> Callable[[], int]:
    def free() -> int:
        with env.begin() as txn:
            return unused_bytes(env, txn, trees)

    return free


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--map-size", type=int, required=True)
    parser.add_argument("--limit", type=int, help="bytes the disk must keep free")
    parser.add_argument("--reserve", type=int, default=0, help="bytes of the reserve file")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    configure(args.log_level)
    space = None if args.limit is None else FreeSpace(args.path, args.limit, args.reserve)
    return serve(args.path, args.map_size, space)


if __name__ == "__main__":
    sys.exit(main())
