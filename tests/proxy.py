"""A TCP proxy in front of a real HTTP server that can stop passing requests on, as a paused server.

``hold(after=n)`` lets ``n`` more requests through and keeps every later one
(the connection stays open, nothing is answered: what a SIGSTOPped server
looks like from the client); ``release()`` passes them on again, but for
those whose client has gone meanwhile. Requests are
framed by their headers and ``Content-Length`` (what aiohttp sends).
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["GatedProxy"]


class GatedProxy:
    """Forwards HTTP/1.1 requests from 127.0.0.1:<port> to ``target``, gated per request."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._budget: int | None = None  # requests still let through; None: all
        self._changed = asyncio.Condition()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.forwarded = 0
        self.received = 0  # requests clients sent, held or not

    async def start(self) -> str:
        """Listen on a port the OS picks; return the proxy's URL."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def hold(self, after: int = 0) -> None:
        """Let ``after`` more requests through, then keep the rest."""
        async with self._changed:
            self._budget = after

    async def release(self) -> None:
        """Pass every request on again, those kept first."""
        async with self._changed:
            self._budget = None
            self._changed.notify_all()

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, client: asyncio.StreamReader, reply: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        upstream, forward = await asyncio.open_connection(*self._target)
        answers = asyncio.create_task(_pipe(upstream, reply))
        try:
            while request := await _read_request(client):
                self.received += 1
                async with self._changed:
                    await self._changed.wait_for(lambda: self._budget != 0)
                    if self._budget is not None:
                        self._budget -= 1
                if client.at_eof():
                    break  # the client gave up on it: the server never sees it
                forward.write(request)
                await forward.drain()
                self.forwarded += 1
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            answers.cancel()
            for writer in (forward, reply):
                writer.close()
            with contextlib.suppress(BaseException):
                await answers
            self._tasks.discard(task)


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    """Return one whole request (headers and body), or b"" at the end of the stream."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return b""
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + (await reader.readexactly(length) if length else b"")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
