"""A lean HTTP/1.1 client for the benchmarks' own clients: keep-alive connections,
each carrying one request at a time, every request written in one piece.

The W1 plugin's clients measure the node, so they should cost what a
compiled client would: aiohttp's client spends about 0.25 ms of a 0.6 ms
round trip on loopback in Python (a request's headers built and parsed, its
body wrapped in streams); here a request is one ``write`` and its answer two
reads. It speaks only what the node answers: a status line, headers and a
``Content-Length`` body.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from urllib.parse import urlsplit

__all__ = ["Pool"]


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def request(self, head: bytes, body: bytes) -> tuple[int, bytes, bool]:
        """Send a request; return its status, its body and whether the connection
        stays open."""
        self.writer.write(head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        header = await self.reader.readuntil(b"\r\n\r\n")
        status = int(header[9:12])
        length, keep = 0, True
        for line in header.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection":
                keep = value.strip().lower() != b"close"
            elif name == b"transfer-encoding":
                raise ValueError("a chunked answer: this client reads Content-Length only")
        return status, await self.reader.readexactly(length), keep


class Pool:
    """Keep-alive connections to one node (``base``: ``http[s]://host:port``); as many
    open as requests have been under way at once."""

    def __init__(
        self, base: str, headers: dict[str, str], tls: ssl.SSLContext | None = None
    ) -> None:
        parts = urlsplit(base)
        self._address = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._tls = tls if parts.scheme == "https" else None
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self._headers = f"Host: {parts.netloc}\r\n{extra}".encode()
        self._idle: list[_Connection] = []

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: Mapping[str, str] = {}
    ) -> tuple[int, bytes]:
        """Send a request over an idle connection (or a new one), with ``headers``
        besides the pool's; return its status and body."""
        connection = self._idle.pop() if self._idle else await self._open()
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head = f"{method} {path} HTTP/1.1\r\n{extra}".encode() + self._headers
        try:
            status, answer, keep = await connection.request(head, body)
        except BaseException:
            connection.writer.close()
            raise
        if keep:
            self._idle.append(connection)
        else:
            connection.writer.close()
        return status, answer

    async def ok(self, method: str, path: str, body: bytes = b"") -> bytes:
        """Send a request; return the body of its 2xx answer (``RuntimeError`` otherwise)."""
        status, answer = await self.request(method, path, body)
        if not 200 <= status < 300:
            raise RuntimeError(f"{method} {path} failed: HTTP {status} {answer[:200]!r}")
        return answer

    async def _open(self) -> _Connection:
        host, port = self._address
        return _Connection(*await asyncio.open_connection(host, port, ssl=self._tls))

    async def close(self) -> None:
        """Close the idle connections."""
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.writer.close()
        for connection in idle:
            await connection.writer.wait_closed()
