"""The embedded store's one writer thread: group commit, the map's growth, and room
on the disk for what a commit adds.

The writer takes every write that is waiting, applies them in one
transaction and commits once: concurrent requests share one fsync and the
event loop never waits on the disk.

A write that adds data (a publish) says what it may need on disk
(``need``). Before a commit, the writer asks the disk's ``FreeSpace``
whether what the commit's writes may need leaves the limit free; if not, those writes fail with
``DiskLow`` (503 with Retry-After) and the others commit. A commit that
fails all the same for want of space (the disk filled by something else, or
by another process) fails its adding writes the same way and commits the
rest again, after releasing the disk's reserve if it holds no adding write:
deletes, lease changes and receives go on on a full disk, and make room.
Nothing that failed was acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import lmdb

from dynamiq.errors import BackendUnavailable, DiskLow, ServerError
from dynamiq.storage.diskspace import DISK_RETRY_SECONDS, FreeSpace

__all__ = ["Gate", "GroupWriter", "need"]

log = logging.getLogger("dynamiq.storage")

MAX_OPS_PER_COMMIT = 4096
PAGE = 4096
# Errors a commit meets on a full disk (LMDB says EIO for a failed write of its pages).
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EIO, errno.EDQUOT})
_DISK_WORDS = ("No space left", "Input/output error", "quota exceeded")


def need(stored: int, records: int) -> int:
    """What a commit adding ``records`` of ``stored`` bytes in all may take on disk: the
    records twice over (copy-on-write pages, overflow pages half full) and a few
    pages each for the tree above them."""
    return 2 * stored + 3 * PAGE * records


class Gate:
    """Many transactions at once, or one map resize alone (LMDB requires it)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._resizing = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._resizing or self._active:
                self._cond.wait()
            self._resizing = True
        try:
            yield
        finally:
            with self._cond:
                self._resizing = False
                self._cond.notify_all()

    def adopt_map_size(self, env: Any) -> None:
        """Take the map size another process set (LMDB's ``MapResizedError``)."""
        with self.exclusive():
            env.set_mapsize(0)


class Write:
    """A write to commit: ``apply`` (of the transaction), what it may need on disk
    (``adds``; 0: it adds nothing, as a delete or a lease), and whom to tell (``to``:
    the writer's own business, a future or a connection)."""

    __slots__ = ("adds", "apply", "to")

    def __init__(self, apply: Callable[[Any], Any], adds: int, to: Any) -> None:
        self.apply = apply
        self.adds = adds
        self.to = to


class GroupWriter:
    """Applies writes to ``env`` on one thread, a group per commit."""

    def __init__(self, env: Any, gate: Gate, space: FreeSpace | None) -> None:
        self.committer = Committer(env, gate, space)
        self._ops: queue.SimpleQueue[Write | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="lmdb-writer", daemon=True)
        self._thread.start()

    @property
    def commits(self) -> int:
        return self.committer.commits

    @property
    def commit_seconds(self) -> float:
        return self.committer.commit_seconds

    def submit(self, apply: Callable[[Any], Any], adds: int = 0) -> asyncio.Future[Any]:
        """Queue a write (``adds``: the bytes it may need on disk); its future settles
        when it committed or failed."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._ops.put(Write(apply, adds, future))
        return future

    def stop(self) -> None:
        """Commit what is queued, then end the thread (blocking)."""
        self._ops.put(None)
        self._thread.join()

    def _loop(self) -> None:
        stop = False
        while not stop:
            first = self._ops.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < MAX_OPS_PER_COMMIT:
                try:
                    op = self._ops.get_nowait()
                except queue.Empty:
                    break
                if op is None:
                    stop = True
                    break
                batch.append(op)
            self._settle(self.committer.commit(batch))

    @staticmethod
    def _settle(done: list[tuple[Write, Any]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]] = {}
        for op, result in done:
            by_loop.setdefault(op.to.get_loop(), []).append((op.to, result))
        for loop, settled in by_loop.items():
            # A closed loop raises RuntimeError: nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_set_results, settled)


class Committer:
    """Commits groups of writes to ``env``: room on the disk first, the map grown as
    it fills. Blocking; one caller at a time."""

    def __init__(self, env: Any, gate: Gate, space: FreeSpace | None) -> None:
        self._env = env
        self._gate = gate
        self._space = space
        self.commits = 0
        self.commit_seconds = 0.0

    def commit(self, batch: list[Write]) -> list[tuple[Write, Any]]:
        """Commit ``batch``, but for the writes that would take the disk past its limit;
        return each write with its result or error."""
        done: list[tuple[Write, Any]] = []
        if self._space is not None and not self._has_room([op for op in batch if op.adds]):
            batch = _refuse_adding(batch, done)
        if not batch:
            return done
        outcome = self._commit(batch)
        if isinstance(outcome, _DiskFull):
            kept = _refuse_adding(batch, done)
            if kept and len(kept) < len(batch):
                outcome = self._commit(kept)
            if (
                kept
                and isinstance(outcome, _DiskFull)
                and self._space
                and self._space.release_reserve()
            ):
                outcome = self._commit(kept)
            if isinstance(outcome, _DiskFull):
                outcome = BackendUnavailable(str(outcome), retry_after=DISK_RETRY_SECONDS)
            batch = kept
        if isinstance(outcome, BaseException):
            return done + [(op, outcome) for op in batch]
        return done + list(zip(batch, outcome, strict=True))

    def _has_room(self, adding: list[Write]) -> bool:
        """Whether what the ``adding`` writes may need leaves the disk's limit free."""
        assert self._space is not None
        if not adding:
            return True
        try:
            return self._space.has_room(sum(op.adds for op in adding))
        except OSError as exc:  # the disk cannot be read: let LMDB say what it can do
            log.warning("cannot read free disk under %s: %s", self._space.path, exc)
            return True

    def _commit(self, batch: list[Write]) -> list[Any] | BaseException:
        started = time.perf_counter()
        for _ in range(20):
            try:
                with self._gate.shared(), self._env.begin(write=True) as txn:
                    outcome = [op.apply(txn) for op in batch]
                self.commits += 1
                self.commit_seconds += time.perf_counter() - started
                return outcome
            except lmdb.MapFullError:
                if not self._grow_map():
                    return BackendUnavailable("the LMDB map is full", retry_after=5)
            except lmdb.MapResizedError:
                self._gate.adopt_map_size(self._env)
            except lmdb.Error as exc:
                if _full(exc):
                    log.warning("LMDB commit failed for want of disk: %s", exc)
                    return _DiskFull(f"LMDB write failed: {exc}")
                log.error("LMDB commit failed: %s", exc)
                return BackendUnavailable(f"LMDB write failed: {exc}")
            except Exception as exc:  # a bug in an op must not kill the writer
                log.exception("LMDB commit crashed")
                return ServerError(f"storage write crashed: {exc!r}")
        return BackendUnavailable("LMDB commit kept failing")

    def _grow_map(self) -> bool:
        with self._gate.exclusive():
            size = self._env.info()["map_size"]
            try:
                self._env.set_mapsize(size * 2)
            except lmdb.Error as exc:
                log.error("cannot grow the LMDB map beyond %d bytes: %s", size, exc)
                return False
        log.warning("LMDB map grown to %d bytes", size * 2)
        return True


def _refuse_adding(batch: list[Write], done: list[tuple[Write, Any]]) -> list[Write]:
    """Fail the writes of ``batch`` that add data with ``DiskLow`` (into ``done``); return
    the others."""
    done += [(op, _disk_low()) for op in batch if op.adds]
    return [op for op in batch if not op.adds]


class _DiskFull(Exception):
    """A commit failed for want of space on the disk."""


def _full(exc: lmdb.Error) -> bool:
    """Whether an LMDB error says the disk is full (or failed a write for want of room)."""
    if isinstance(exc, lmdb.DiskError):
        return True
    code = getattr(exc, "errno", None)
    return code in _DISK_ERRNOS or any(word in str(exc) for word in _DISK_WORDS)


def _disk_low() -> DiskLow:
    return DiskLow(
        "the data directory's disk has no room for this publish below limits.diskfreelimit: "
        "publishes wait until consumers make room",
        retry_after=DISK_RETRY_SECONDS,
    )


def _set_results(settled: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for future, result in settled:
        if future.done():
            continue
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)
