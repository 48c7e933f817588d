"""How the embedded store's processes speak to its writer process: frames, the
writer's address, errors as data.

A frame is a 4-byte big-endian length and a pickle. A request is ``(id, op,
args, adds)``: one of ``ops.OPS`` by name, its arguments, the bytes it
may need on disk. A reply is ``(id, ok, value, commits, seconds)``: the op's
result (``ok``) or its error (``error_of``), and the writer's commits and
seconds spent committing so far. Only processes of the writer's own user may
connect (the socket's file is the user's alone, and the writer checks the
peer's credentials), so pickles come from the node's own processes.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import struct
from pathlib import Path
from typing import Any

from dynamiq.errors import BackendUnavailable, DiskLow, DynamiqError, RetryLater, ServerError

__all__ = ["LOG_FILE", "SOCKET_FILE", "address", "error_of", "frame", "frames", "is_file", "raised"]

LOG_FILE = "writer.log"  # the writer process's, in the store's directory
SOCKET_FILE = "writer.sock"  # where the writer listens, in the store's directory
_SOCKET_PATH_MAX = 108  # bytes of a Unix socket's path, its final NUL included
_LENGTH = struct.Struct(">I")
_ERRORS: dict[str, type[DynamiqError]] = {
    cls.__name__: cls for cls in (BackendUnavailable, DiskLow, ServerError)
}


def address(path: Path) -> bytes:
    """The writer's socket for the store in ``path``: the file ``SOCKET_FILE`` in the
    directory, reached from wherever the directory is (processes in other network
    namespaces included, as nodes sharing one directory may be). When that
    path is too long for a socket's address, one in Linux's abstract namespace,
    named by the directory and the user (reached only within one network
    namespace)."""
    file = os.fsencode(path / SOCKET_FILE)
    if len(file) < _SOCKET_PATH_MAX:
        return file
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:32]
    return f"\0dynamiq-lmdb-writer-{os.getuid()}-{digest}".encode()


def is_file(where: bytes) -> bool:
    """Whether the writer's address ``where`` is a file (not an abstract name)."""
    return not where.startswith(b"\0")


def frame(message: Any) -> bytes:
    raw = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(raw)) + raw


def frames(buffer: bytearray) -> list[Any]:
    """The whole frames at the start of ``buffer``, taken out of it."""
    out: list[Any] = []
    at, size = 0, len(buffer)
    while size - at >= _LENGTH.size:
        (length,) = _LENGTH.unpack_from(buffer, at)
        end = at + _LENGTH.size + length
        if end > size:
            break
        out.append(pickle.loads(memoryview(buffer)[at + _LENGTH.size : end]))
        at = end
    if at:
        del buffer[:at]
    return out


def error_of(exc: BaseException) -> tuple[str, str, int | None]:
    """An error as a reply carries it."""
    if isinstance(exc, DynamiqError) and type(exc).__name__ in _ERRORS:
        retry_after = exc.retry_after if isinstance(exc, RetryLater) else None
        return type(exc).__name__, str(exc), retry_after
    return ServerError.__name__, f"storage write crashed: {exc!r}", None


def raised(error: tuple[str, str, int | None]) -> DynamiqError:
    """The error a reply carries, to raise."""
    kind, message, retry_after = error
    cls = _ERRORS.get(kind, ServerError)
    if retry_after is not None and issubclass(cls, RetryLater):
        return cls(message, retry_after=retry_after)
    return cls(message)
