"""Real servers for the tests, on free loopback ports, stopped by pid."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["free_port", "redis_server", "require"]


def free_port() -> int:
    """Return a TCP port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def require(binary: str) -> str:
    """Return the path of ``binary``; skip the test without it, or fail in CI."""
    path = shutil.which(binary)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{binary} is required in CI (.ci/run installs it)", pytrace=False)
        pytest.skip(f"{binary} is not installed")
    return path


@contextmanager
def redis_server(
    data: Path, port: int | None = None, replica_of: str | None = None
) -> Iterator[str]:
    """Run redis-server with fsync on every write (a replica of ``replica_of``); yield its URL."""
    binary = require("redis-server")
    port = port or free_port()
    data.mkdir(parents=True, exist_ok=True)
    settings = {
        "bind": "127.0.0.1",
        "port": str(port),
        "dir": str(data),
        "appendonly": "yes",
        "appendfsync": "always",
        "save": "",
        "protected-mode": "yes",
        "daemonize": "no",
        "logfile": str(data / "redis.log"),
        "repl-diskless-sync-delay": "0",
    }
    args = [binary, *(x for key, value in settings.items() for x in (f"--{key}", value))]
    if replica_of:
        args += ["--replicaof", *replica_of.split(":")]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
