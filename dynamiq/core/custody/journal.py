"""The lease journal: the leases a node hands out, and receive counts not stored yet.

Every lease a node makes (a delivery, an extension, one taken over in a
handoff) is appended to the node's journal before its answer goes out, with
the message's receive count and when the lease ends (wall-clock ms): a plain
write to a file, no fsync (the kernel keeps what a killed process wrote; a
power cut can take the last writes). Two things hang on it:

- **Counts.** A queue without ``max_receives`` or ``retry_backoff`` delivers
  without a store write: the count is stored when the lease ends without a
  delete. The journal keeps it meanwhile, so a ``kill -9`` loses no receive.
- **Leases.** A node that takes over the slice of a member that died, was
  cut off or stood still (no handoff: it cannot be asked) holds the leases
  that member's journal names until they would have ended, so no message is
  leased twice while a consumer holds it. A restarted node does the same
  with its own journal of its previous life.

The journal is a run of segment files ``<node>.<n>.journal`` in one
directory, a new one every ``SEGMENT_SECONDS``. A closed segment is deleted
as soon as none of its messages is still leased here (each lease ended in a
delete, or in a lapse or release that stored the count).

Replay stores each count a journal holds unless the message's record already
has one as high, and returns the leases still live. A node replays its own
journal (of its previous life) before it serves; and the journals of members
gone from its view before it serves their slice: those it can read, when the
nodes share a data directory. A file is deleted once none of its leases is
live any more: another node may take over a part of the slice before the
restarted node is back in its view, and must find those leases too.
Replaying a journal whose node still lives stores its counts a little
early, which is what a counted queue does anyway; but a file of another
node is deleted only once that node can no longer be writing to it (opened
more than ``OPEN_SECONDS`` ago): a node just restarted, not yet in the
replaying node's view, may have opened a segment with leases that have
ended already, and would write its next leases into a deleted file.
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
from dynamiq.core.delivery.state import QueueState
from dynamiq.core.records import counted_to
from dynamiq.storage.base import StorageBackend

__all__ = ["LeaseJournal", "Noted", "Replayed", "replay", "store_counts"]

log = logging.getLogger("dynamiq.core")

SEGMENT_SECONDS = 2.0
# A segment is written to for SEGMENT_SECONDS after it is opened; a file opened longer
# ago than this (by the wall clock in its name) is written to no more.
OPEN_SECONDS = 3 * SEGMENT_SECONDS
REPLAY_BATCH = 1000
SUFFIX = ".journal"
_LENGTH = struct.Struct(">I")


class Noted(msgspec.Struct, frozen=True, array_like=True):
    """A lease as journaled: the message, its receive count and first receive (ms),
    when the lease ends (wall-clock ms; 0 in entries of older versions) and its
    ordered group."""

    id: int
    count: int
    first_ms: int
    until_ms: int = 0
    group: str | None = None


# A ``Noted`` as written: the tuple encodes as the same array, and is quicker made.
_Row = tuple[int, int, int, int, str | None]
# One entry: a queue's bucket and the leases made on its messages.
Entry = tuple[str, list[Noted]]
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(Entry).decode


@dataclass
class Replayed:
    """What a replay found: counts stored, and the leases still live, per bucket."""

    stored: int = 0
    leases: dict[str, list[Noted]] = field(default_factory=dict)
    kept: list[tuple[Path, int]] = field(default_factory=list)  # files left, live until (ms)


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
        self._past: list[tuple[Path, int]] = []  # a past life's files, their leases' end (ms)
        self._made = 0
        self._failed = False
        self._stopped = False

    def note(self, uid: str, state: QueueState, ids: Sequence[int]) -> None:
        """Journal the leases ``state`` holds on ``ids`` of bucket ``uid`` as they are
        handed out (or extended, or taken over); return once the file has them."""
        if self._stopped or not ids:
            return
        segment = self._segment()
        payload = _encode((uid, self._noted(state, ids)))
        try:
            _append(self._dir, segment, _LENGTH.pack(len(payload)) + payload)
        except OSError as exc:
            if not self._failed:
                log.warning("lease journal not written (%s): a crash may lose receive counts", exc)
            self._failed = True
            return
        self._failed = False
        segment.leases.append((state, list(ids)))

    def _noted(self, state: QueueState, ids: Sequence[int]) -> list[_Row]:
        """The leases on ``ids`` as ``Noted`` encodes them (a tuple is a quicker way to
        the same array). The leases of one receive end together: their end in
        wall-clock ms is worked out once."""
        now, now_ms = self._clock.now(), self._clock.wall_ms()
        counts, deadline, group_of = state.counts.get, state.leases.deadline, state.groups.group_of
        until_ms: dict[float | None, int] = {}
        noted: list[_Row] = []
        for mid in ids:
            ends = deadline(mid)
            until = until_ms.get(ends)
            if until is None:
                until = until_ms[ends] = now_ms + max(0, round(((ends or now) - now) * 1000))
            count, first_ms = counts(mid, (0, 0))
            noted.append((mid, count, first_ms, until, group_of(mid)))
        return noted

    def tidy(self) -> int:
        """Delete the closed segments whose leases are all settled; return how many."""
        if self._open is not None and self._clock.now() - self._open.opened >= SEGMENT_SECONDS:
            self._close()
        done = [segment for segment in self._closed if _settled(segment)]
        for segment in done:
            self._closed.remove(segment)
            _unlink(segment.path)
        now_ms = self._clock.wall_ms()
        ended = [path for path, until_ms in self._past if until_ms <= now_ms]
        for path in ended:
            _unlink(path)
        self._past = [(path, until_ms) for path, until_ms in self._past if until_ms > now_ms]
        return len(done) + len(ended)

    def restart(self) -> None:
        """Start a new segment: this node forgot its leases (the others served its slice)."""
        if self._open is not None:
            self._close()

    def close(self) -> None:
        """Close the open segment (at shutdown); later deliveries are not journaled."""
        self._stopped = True
        self.restart()

    async def replay_own(self, store: StorageBackend) -> Replayed:
        """Replay this node's journal of a previous life (before it serves); the caller
        journals the live leases anew as it takes them over. The files naming live
        leases stay until those end (``tidy``), for a node taking over meanwhile."""
        paths = await asyncio.to_thread(self._files, {self._node}, True)
        now_ms = self._clock.wall_ms()
        found = await replay(store, paths, now_ms, written_after_ms=now_ms)  # a life over
        self._past += found.kept
        return found

    async def replay_others(self, store: StorageBackend, alive: Iterable[str]) -> Replayed:
        """Replay the journals of the nodes not in ``alive`` (node names)."""
        keep = {node_file_name(name) for name in alive} | {self._node}
        paths = await asyncio.to_thread(self._files, keep, False)
        now_ms = self._clock.wall_ms()
        return await replay(store, paths, now_ms, now_ms - round(OPEN_SECONDS * 1000))

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


def _opened_ms(path: Path) -> int:
    """When a segment file was opened (wall-clock ms, from its name; 0 if it says not)."""
    stamp = path.name.split(".")[1].partition("-")[0] if path.name.count(".") >= 2 else ""
    return int(stamp) if stamp.isdigit() else 0


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


async def replay(
    store: StorageBackend, paths: Sequence[Path], now_ms: int, written_after_ms: int
) -> Replayed:
    """Store the counts the journal files hold where the records have less, and return
    them with the leases live at ``now_ms``; delete the files that name no live lease
    (the others are ``kept``), but those opened after ``written_after_ms``: their
    node may write to them still."""
    latest: dict[str, dict[int, Noted]] = {}
    done: list[Path] = []
    kept: list[tuple[Path, int]] = []
    for path in paths:
        try:
            entries = await asyncio.to_thread(read, path)
        except FileNotFoundError:  # another node replayed it first
            continue
        until_ms = 0
        for uid, delivered in entries:
            known = latest.setdefault(uid, {})
            for noted in delivered:
                until_ms = max(until_ms, noted.until_ms)
                before = known.get(noted.id)
                if before is None or (noted.count, noted.until_ms) >= (
                    before.count,
                    before.until_ms,
                ):
                    known[noted.id] = noted
        if until_ms > now_ms:
            kept.append((path, until_ms))
        elif _opened_ms(path) <= written_after_ms:
            done.append(path)
    found = Replayed(kept=kept)
    for uid, noted_by_id in latest.items():
        ended = [(n.id, n.count, n.first_ms) for n in noted_by_id.values()]
        for start in range(0, len(ended), REPLAY_BATCH):
            found.stored += await store_counts(store, uid, ended[start : start + REPLAY_BATCH])
        if held := [n for n in noted_by_id.values() if n.until_ms > now_ms]:
            found.leases[uid] = held
    for path in done:
        await asyncio.to_thread(_unlink, path)
    return found


async def store_counts(
    store: StorageBackend, uid: str, counts: Sequence[tuple[int, int, int]]
) -> int:
    """Store ``(id, count, first received ms)`` in the records of bucket ``uid`` that
    have a lower count (or are gone: nothing to do); return how many were stored."""
    ids = [mid for mid, _, _ in counts]
    rows: list[tuple[int, bytes]] = []
    for (mid, count, first_ms), raw in zip(counts, await store.get(uid, ids), strict=True):
        if raw is not None and (raised := counted_to(raw, count, first_ms)) is not None:
            rows.append((mid, raised))
    return sum(await store.replace(uid, rows)) if rows else 0
