"""HTTP/1.1 as the node's front end reads and writes it: a request's head, an answer's bytes.

A head is parsed by llhttp (Node.js's parser, through ``httptools``): what it
refuses (a smuggled length, a folded or malformed line, a bare LF...) is not
the front end's to answer. Of what it reads, the front end takes only the
plain requests its routes take (a request line, headers, a
``Content-Length`` body): a head it does not read as surely as aiohttp would
(a chunked or continued body, an upgrade, a repeated or non-ASCII header, a
header name of rarer characters, an escaped or dotted path, a query) is
``None`` as well, and the connection goes to aiohttp, which answers it as it
answers every other route. The answers it writes are aiohttp's, header for
header.
"""

from __future__ import annotations

import http
import re
import time
from collections.abc import Iterable
from email.utils import formatdate

import httptools
from aiohttp.http import SERVER_SOFTWARE

__all__ = ["MAX_HEAD", "Head", "answer", "parse_head"]

MAX_HEAD = 8190  # bytes of a request's head at most (aiohttp's line limit)
_REASONS = {status.value: status.phrase for status in http.HTTPStatus}
# The target of a plain request: a path of plain characters (no query, no escape).
_PATH = re.compile(rb"/[A-Za-z0-9/_.:-]*")
_NAME = re.compile(rb"[A-Za-z0-9-]*[A-Za-z0-9][A-Za-z0-9-]*")
_VALUE = re.compile(rb"[\x20-\x7e]*")  # printable ASCII: no control character, no tab
_MIMETYPE = re.compile(r"[a-z0-9.+-]+/[a-z0-9.+-]+")
_VERSIONS = ("1.1", "1.0")
# Headers a request of the front end's own must not have: its body or its
# connection would be something other than a Content-Length body over HTTP/1.x.
_OTHERS = frozenset({"transfer-encoding", "expect", "upgrade", "content-encoding"})


class Head:
    """A request's line and headers (names in lower case), as the front end took them."""

    __slots__ = ("headers", "keep_alive", "length", "method", "mimetype", "path", "version")

    def __init__(self, method: str, path: str, version: str, headers: dict[str, str]) -> None:
        self.method = method
        self.path = path
        self.version = version  # "1.1" or "1.0"
        self.headers = headers
        self.length = 0  # of the body
        self.keep_alive = True
        # The body's media type without its parameters, as aiohttp reads it.
        self.mimetype = "application/octet-stream"


class _Fields:
    """What llhttp reads of one request's head, as llhttp's callbacks hand it over."""

    __slots__ = ("complete", "headers", "plain", "target")

    def __init__(self) -> None:
        self.target = b""
        self.headers: dict[str, str] = {}
        self.plain = True  # every header plain, none given twice
        self.complete = False

    def on_url(self, target: bytes) -> None:
        self.target += target

    def on_header(self, name: bytes, value: bytes) -> None:
        if not (_NAME.fullmatch(name) and _VALUE.fullmatch(value)):
            self.plain = False  # a name of rarer characters, a value of other bytes
            return
        key = name.decode().lower()
        self.plain = self.plain and key not in self.headers
        self.headers[key] = value.decode().strip(" ")

    def on_headers_complete(self) -> None:
        self.complete = True


def parse_head(raw: bytes) -> Head | None:
    """Read a request's head (without the blank line that ends it); None when it is
    not one the front end serves itself."""
    fields = _Fields()
    parser = httptools.HttpRequestParser(fields)
    try:
        parser.feed_data(raw + b"\r\n\r\n")
    except (httptools.HttpParserError, httptools.HttpParserUpgrade):
        return None  # malformed, or another protocol: aiohttp's to refuse or serve
    target, version, method = fields.target, parser.get_http_version(), parser.get_method()
    if not (fields.complete and fields.plain and version in _VERSIONS):
        return None
    if raw.partition(b"\r\n")[0] != b"%s %s HTTP/%s" % (method, target, version.encode()):
        return None  # a request line llhttp reads leniently (two spaces, say)
    if not _PATH.fullmatch(target) or b"//" in target or b"/." in target:
        return None
    if not _OTHERS.isdisjoint(fields.headers):
        return None
    head = Head(method.decode(), target.decode(), version, fields.headers)
    return head if _read_fields(head) else None


def _read_fields(head: Head) -> bool:
    """Read the length, the media type and keep-alive from the headers; False when
    one is not plain."""
    headers = head.headers
    length = headers.get("content-length")
    if length is not None:
        if not (length.isascii() and length.isdigit() and len(length) <= 18):
            return False
        head.length = int(length)
    content_type = headers.get("content-type")
    if content_type is not None:
        mimetype = content_type.partition(";")[0].strip().lower()
        if not _MIMETYPE.fullmatch(mimetype):
            return False
        head.mimetype = mimetype
    connection = headers.get("connection")
    if connection is None:
        head.keep_alive = head.version == "1.1"
    else:
        tokens = {t.strip().lower() for t in connection.split(",")}
        head.keep_alive = "close" not in tokens if head.version == "1.1" else "keep-alive" in tokens
    return "host" in headers


class _Date:
    """The ``Date`` header's value, made once a second."""

    second = -1
    text = ""

    @classmethod
    def now(cls) -> str:
        second = int(time.time())
        if second != cls.second:
            cls.second, cls.text = second, formatdate(second, usegmt=True)
        return cls.text


def answer(
    head: Head,
    status: int,
    body: bytes,
    headers: Iterable[tuple[str, str]] = (),
    keep_alive: bool | None = None,
) -> bytes:
    """An answer to ``head`` as aiohttp writes it: a JSON ``body`` with ``status`` and
    ``headers`` besides (``keep_alive``: whether the connection stays open; by
    default, as the request asked)."""
    keep = head.keep_alive if keep_alive is None else keep_alive
    lines = [f"HTTP/{head.version} {status} {_REASONS.get(status, '')}"]
    lines.append("Content-Type: application/json")
    lines.extend(f"{name}: {value}" for name, value in headers)
    lines.append(f"Content-Length: {len(body)}")
    lines.append(f"Date: {_Date.now()}")
    lines.append(f"Server: {SERVER_SOFTWARE}")
    if head.version == "1.1" and not keep:
        lines.append("Connection: close")
    elif head.version == "1.0" and keep:
        lines.append("Connection: keep-alive")
    return "\r\n".join(lines).encode() + b"\r\n\r\n" + body
