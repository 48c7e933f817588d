"""The lease journal: receive counts handed out and not stored yet.

A queue without ``max_receives`` or ``retry_backoff`` delivers without a
store write: the count is stored when the lease ends without a delete. So
that a ``kill -9`` of the node loses no receive, every such delivery is
appended to the node's journal before its answer goes out: a plain write to
a file, no fsync (the kernel keeps what a killed process wrote; a power cut
can take the last writes, and with them those counts' last increment).

The journal is a run of segment files ``<node>.<n>.journal`` in one
directory, a new one every ``SEGMENT_SECONDS``. A closed segment is deleted
as soon as none of its messages is still leased here (each lease ended in a
delete, or in a lapse or release that stored the count).

Replay stores each count a journal holds unless the message's record already
has one as high, then deletes the files. A node replays its own journal (of
its previous life) before it serves, and the journals of members that left
before it serves their slice: those it can read, when the nodes share a data
directory. Replaying a journal whose node still lives stores its counts a
little early, which is what a counted queue does anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from dynamiq.core.clock import Clock
from dynamiq.core.records import meta_of, with_meta
from dynamiq.core.state import QueueState
from dynamiq.storage.base import StorageBackend

__all__ = ["LeaseJournal", "replay", "store_counts"]

log = logging.getLogger("dynamiq.core")

SEGMENT_SECONDS = 2.0
REPLAY_BATCH = 1000
SUFFIX = ".journal"
_LENGTH = struct.Struct(">I")

# One entry: a queue's bucket and its messages as delivered: (id, count, first ms).
Entry = tuple[str, list[tuple[int, int, int]]]
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(tuple[str, list[tuple[int, int, int]]]).decode


@dataclass
class _Segment:
    path: Path
    opened: float
    fd: int | None = None  # opened at the first write
    # The leases each entry journaled: settled once no id is in its state's counts.
    leases: list[tuple[QueueState, list[int]]] = field(default_factory=list)
    settled: int = 0  # entries known settled, from the start


class LeaseJournal:
    """One node's journal of receive counts not stored yet.

    Entries are appended on the event loop: a write of a few hundred bytes to
    the page cache, without fsync, takes microseconds (a hop to a thread and
    back costs twenty times that, on every receive). Replays read in a thread.
    """

    def __init__(self, directory: Path, node: str, clock: Clock) -> None:
        self._dir = directory
        self._node = node_file_name(node)
        self._clock = clock
        self._open: _Segment | None = None
        self._closed: list[_Segment] = []
        self._made = 0
        self._failed = False
        self._stopped = False

    def note(self, uid: str, state: QueueState, delivered: Sequence[tuple[int, int, int]]) -> None:
        """Journal ``(id, count, first received ms)`` of messages of bucket ``uid`` as
        they are handed out, leased in ``state``; return once the file has them."""
        if self._stopped:
            return
        segment = self._segment()
        payload = _encode((uid, list(delivered)))
        try:
            _append(self._dir, segment, _LENGTH.pack(len(payload)) + payload)
        except OSError as exc:
            if not self._failed:
                log.warning("lease journal not written (%s): a crash may lose receive counts", exc)
            self._failed = True
            return
        self._failed = False
        segment.leases.append((state, [mid for mid, _, _ in delivered]))

    def tidy(self) -> int:
        """Delete the closed segments whose leases are all settled; return how many."""
        if self._open is not None and self._clock.now() - self._open.opened >= SEGMENT_SECONDS:
            self._close()
        done = [segment for segment in self._closed if _settled(segment)]
        for segment in done:
            self._closed.remove(segment)
            _unlink(segment.path)
        return len(done)

    def restart(self) -> None:
        """Start a new segment: this node forgot its leases (the others served its slice)."""
        if self._open is not None:
            self._close()

    def close(self) -> None:
        """Close the open segment (at shutdown); later deliveries are not journaled."""
        self._stopped = True
        self.restart()

    async def replay_own(self, store: StorageBackend) -> int:
        """Replay this node's journal of a previous life (before it serves)."""
        paths = await asyncio.to_thread(self._files, {self._node}, True)
        return await replay(store, paths)

    async def replay_others(self, store: StorageBackend, alive: Iterable[str]) -> int:
        """Replay the journals of the nodes not in ``alive`` (node names)."""
        keep = {node_file_name(name) for name in alive} | {self._node}
        paths = await asyncio.to_thread(self._files, keep, False)
        return await replay(store, paths)

    def _files(self, nodes: set[str], of: bool) -> list[Path]:
        """The segment files of ``nodes`` (``of``), or of every node but them, oldest first."""
        found = self._dir.glob(f"*{SUFFIX}") if self._dir.is_dir() else []
        return sorted(p for p in found if (p.name.split(".")[0] in nodes) == of)

    def _segment(self) -> _Segment:
        segment = self._open
        now = self._clock.now()
        if segment is not None and now - segment.opened < SEGMENT_SECONDS:
            return segment
        if segment is not None:
            self._close()
        self._made += 1
        path = self._dir / f"{self._node}.{self._clock.wall_ms()}-{self._made}{SUFFIX}"
        self._open = _Segment(path, now)
        return self._open

    def _close(self) -> None:
        segment, self._open = self._open, None
        if segment is not None:
            _close_file(segment)
            self._closed.append(segment)


def _append(directory: Path, segment: _Segment, frame: bytes) -> None:
    """Write one entry, opening the segment's file at its first."""
    if segment.fd is None:
        directory.mkdir(parents=True, exist_ok=True)
        segment.fd = os.open(segment.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.write(segment.fd, frame)


def _close_file(segment: _Segment) -> None:
    if segment.fd is not None:
        os.close(segment.fd)


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def node_file_name(node: str) -> str:
    """A node's name as the journal's file names carry it (no dots, no separators)."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in node)


def _settled(segment: _Segment) -> bool:
    leases = segment.leases
    while segment.settled < len(leases):
        state, ids = leases[segment.settled]
        counts = state.counts
        if any(mid in counts for mid in ids):
            return False
        segment.settled += 1
    return True


def read(path: Path) -> list[Entry]:
    """Return a segment's entries (a last entry cut short by the crash is left out)."""
    data = path.read_bytes()
    entries: list[Entry] = []
    at = 0
    while at + _LENGTH.size <= len(data):
        (length,) = _LENGTH.unpack_from(data, at)
        start = at + _LENGTH.size
        if start + length > len(data):
            break
        try:
            entries.append(_decode(data[start : start + length]))
        except msgspec.DecodeError:
            log.warning("lease journal %s: an unreadable entry, skipped", path.name)
        at = start + length
    return entries


async def replay(store: StorageBackend, paths: Sequence[Path]) -> int:
    """Store the counts the journal files hold where the records have less; delete the
    files; return how many counts were stored."""
    highest: dict[str, dict[int, tuple[int, int]]] = {}
    for path in paths:
        try:
            entries = await asyncio.to_thread(read, path)
        except FileNotFoundError:  # another node replayed it first
            continue
        for uid, delivered in entries:
            known = highest.setdefault(uid, {})
            for mid, count, first_ms in delivered:
                if count > known.get(mid, (0, 0))[0]:
                    known[mid] = (count, first_ms)
    stored = 0
    for uid, counts in highest.items():
        ended = [(mid, count, first_ms) for mid, (count, first_ms) in counts.items()]
        for start in range(0, len(ended), REPLAY_BATCH):
            stored += await store_counts(store, uid, ended[start : start + REPLAY_BATCH])
    for path in paths:
        await asyncio.to_thread(_unlink, path)
    return stored


async def store_counts(
    store: StorageBackend, uid: str, counts: Sequence[tuple[int, int, int]]
) -> int:
    """Store ``(id, count, first received ms)`` in the records of bucket ``uid`` that
    have a lower count (or are gone: nothing to do); return how many were stored."""
    ids = [mid for mid, _, _ in counts]
    rows: list[tuple[int, bytes]] = []
    for (mid, count, first_ms), raw in zip(counts, await store.get(uid, ids), strict=True):
        if raw is None:
            continue
        meta = meta_of(raw)[1]
        if meta.receive_count < count:
            raised = msgspec.structs.replace(
                meta, receive_count=count, first_received_ms=meta.first_received_ms or first_ms
            )
            rows.append((mid, with_meta(raw, raised)))
    return sum(await store.replace(uid, rows)) if rows else 0
