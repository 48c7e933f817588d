"""The queues a process knows, with the indexes its upkeep reads instead of walking every
queue: names in order (listings page from a name), buckets by uid, the queues with a
retention or an idle deadline, and who uses a queue as its dead-letter queue. Each
kept as the records change, so a round costs what is due, not what exists."""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Iterable, Iterator

from dynamiq.models import QueueRecord, QueueSettings

__all__ = ["QueueIndex"]

SHARED_SETTINGS = 1000  # distinct settings shared between queues, at most
_VERSIONS = itertools.count(1)  # of every index in the process: never one twice


class QueueIndex:
    """Queue records by name, and the indexes kept beside them."""

    def __init__(self) -> None:
        self._records: dict[str, QueueRecord] = {}
        self._names: list[str] = []  # sorted, once the names added since are in (``_sorted``)
        self._added: list[str] = []  # names added since it was last sorted
        self._by_uid: dict[str, str] = {}
        self._retained: dict[str, None] = {}  # names, in the order they got a retention
        self._expiring: dict[str, None] = {}
        self._users: dict[str, set[str]] = {}  # dead-letter queue -> the queues using it
        self._settings: dict[QueueSettings, QueueSettings] = {}  # one of each seen
        self.version = next(_VERSIONS)  # a new one with every change of a record

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, name: object) -> bool:
        return name in self._records

    def get(self, name: str) -> QueueRecord | None:
        return self._records.get(name)

    def found(self, names: Iterable[str]) -> dict[str, QueueRecord]:
        """The records of those of ``names`` that exist (a fan-out's queues at once)."""
        get = self._records.get
        return {name: record for name in names if (record := get(name)) is not None}

    def put(self, record: QueueRecord) -> None:
        """Keep ``record`` (new, or replacing its queue's); its settings shared with
        the queues that have the same (most have the defaults)."""
        settings = self._shared(record.settings)
        if settings is not record.settings:
            record = dataclasses.replace(record, settings=settings)
        name = record.name
        self.version = next(_VERSIONS)
        before = self._records.get(name)
        if before is None:
            self._added.append(name)  # one sort for many: a whole read adds a million
        else:
            self._unindex(before)
        self._records[name] = record
        self._by_uid[record.uid] = name
        settings = record.settings
        if settings.retention_seconds:
            self._retained[name] = None
        if settings.expires_after_seconds:
            self._expiring[name] = None
        if settings.dead_letter_queue is not None:
            self._users.setdefault(settings.dead_letter_queue, set()).add(name)

    def _shared(self, settings: QueueSettings) -> QueueSettings:
        try:
            known = self._settings.get(settings)
        except TypeError:  # a setting that cannot be hashed: kept as it is
            return settings
        if known is not None:
            return known
        if len(self._settings) < SHARED_SETTINGS:
            self._settings[settings] = settings
        return settings

    def pop(self, name: str) -> QueueRecord | None:
        """Forget a queue; return its record, if it was known."""
        record = self._records.pop(name, None)
        if record is not None:
            self.version = next(_VERSIONS)
            names = self._sorted()
            del names[bisect.bisect_left(names, name)]
            self._unindex(record)
        return record

    def _sorted(self) -> list[str]:
        """Every name, sorted: those added since the last call sorted in (a sorted run
        and a few more sort in linear time)."""
        if self._added:
            self._names += self._added
            self._added.clear()
            self._names.sort()
        return self._names

    def _unindex(self, record: QueueRecord) -> None:
        if self._by_uid.get(record.uid) == record.name:
            del self._by_uid[record.uid]
        self._retained.pop(record.name, None)
        self._expiring.pop(record.name, None)
        target = record.settings.dead_letter_queue
        if target is not None and (users := self._users.get(target)) is not None:
            users.discard(record.name)
            if not users:
                del self._users[target]

    def names(self) -> list[str]:
        """Every name, sorted (a copy)."""
        return list(self._sorted())

    def names_from(self, after: str = "", prefix: str = "") -> Iterator[str]:
        """The names after ``after`` (and starting with ``prefix``), in order."""
        names = self._sorted()
        start = bisect.bisect_right(names, after) if after else 0
        start = max(start, bisect.bisect_left(names, prefix))
        for name in names[start:]:
            if not name.startswith(prefix):
                return
            yield name

    def count_prefixed(self, *prefixes: str) -> int:
        """How many names start with one of ``prefixes`` (non-empty, none another's start)."""
        return sum(hi - lo for lo, hi in map(self._prefixed, prefixes))

    def names_without(self, *prefixes: str) -> list[str]:
        """Every name but those starting with one of ``prefixes`` (non-empty, none
        another's start), sorted (a copy)."""
        names = self._sorted()
        out: list[str] = []
        at = 0
        for lo, hi in sorted(map(self._prefixed, prefixes)):
            out += names[at:lo]
            at = hi
        return out + names[at:]

    def _prefixed(self, prefix: str) -> tuple[int, int]:
        """Where the names starting with ``prefix`` lie among the sorted names."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        names = self._sorted()
        return bisect.bisect_left(names, prefix), bisect.bisect_left(names, end)

    def records(self) -> list[QueueRecord]:
        """Every record, by name."""
        return [self._records[name] for name in self._sorted()]

    def by_uid(self, uid: str) -> QueueRecord | None:
        """The queue whose bucket is ``uid``, if any."""
        name = self._by_uid.get(uid)
        return None if name is None else self._records.get(name)

    def retained(self) -> list[QueueRecord]:
        """The queues with a retention (``retention_seconds``)."""
        return [self._records[name] for name in self._retained]

    def expiring(self) -> list[QueueRecord]:
        """The queues deleted when idle (``expires_after_seconds``)."""
        return [self._records[name] for name in self._expiring]

    def expires(self, name: str) -> bool:
        """Whether the queue ``name`` is deleted when idle."""
        return name in self._expiring

    def expiring_of(self, names: Iterable[str]) -> Iterable[str]:
        """Those of ``names`` whose queues are deleted when idle."""
        return self._expiring.keys() & names if self._expiring else ()

    def users_of(self, name: str) -> list[str]:
        """The queues (other than itself) whose dead-letter queue is ``name``, sorted."""
        return sorted(self._users.get(name, set()) - {name})
