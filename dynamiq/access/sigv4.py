"""AWS Signature Version 4, verified as SQS and SNS verify it.

The SDKs sign SQS's JSON protocol, SQS's query protocol and SNS's query protocol
alike: a POST whose body is the whole request, signed in the ``Authorization``
header, or a presigned URL whose query carries the signature. ``verify`` rebuilds
the canonical request from what arrived (the raw path and query, the signed
headers, the body's SHA-256, computed here since these SDKs send no
``x-amz-content-sha256``), derives the signing key from the caller's secret and
compares the signatures in constant time. It refuses as AWS does, with AWS's
codes and words:

- no signature at all: ``MissingAuthenticationToken`` (403);
- an ``Authorization`` header missing a part, or not SigV4: ``IncompleteSignature`` (400);
- an unknown access key id, or a session token (the node has no STS):
  ``InvalidClientTokenId`` (403);
- a wrong signature, scope or date, ``UNSIGNED-PAYLOAD``, a request dated more
  than ``max_skew`` seconds from the node's clock or a presigned URL past its
  expiry: ``SignatureDoesNotMatch`` (403).

Nothing here logs: what a refusal says is what the caller is told.
"""

from __future__ import annotations

import calendar
import functools
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote

from dynamiq.errors import ClientError

__all__ = ["ALGORITHM", "MAX_SKEW_SECONDS", "SignatureRefused", "SignedRequest", "verify"]

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW_SECONDS = 900  # AWS's 15 minutes, either way
MAX_PRESIGNED_SECONDS = 604_800  # X-Amz-Expires at most: 7 days, as AWS
UNSIGNED = "UNSIGNED-PAYLOAD"
_STAMP = "%Y%m%dT%H%M%SZ"
_STAMP_PATTERN = re.compile(r"\d{8}T\d{6}Z")
_SPACES = re.compile(r"\s+")
MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. "
    "Consult the service documentation for details."
)
_STATUS = {
    "MissingAuthenticationToken": 403,
    "IncompleteSignature": 400,
    "InvalidClientTokenId": 403,
    "SignatureDoesNotMatch": 403,
}


class SignatureRefused(ClientError):
    """Raised when a request's signature does not let it in; ``code`` is AWS's."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.status = _STATUS[code]


@dataclass(frozen=True, slots=True)
class SignedRequest:
    """What arrived, as it arrived: the raw path and query, headers, body."""

    method: str
    path: str
    query: str
    headers: Sequence[tuple[str, str]]
    body: bytes
    _named: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        named: dict[str, str] = {}
        for key, value in self.headers:  # a repeated header's values, joined by commas
            name = key.lower()
            named[name] = f"{named[name]},{value}" if name in named else value
        object.__setattr__(self, "_named", named)

    def header(self, name: str) -> str | None:
        """The values of header ``name`` (lower case), joined by commas; None if absent."""
        return self._named.get(name)


@dataclass(frozen=True, slots=True)
class _Parts:
    """A signature's parts, from the header or the presigned query."""

    credential: tuple[str, str, str, str, str]  # key id, date, region, service, terminal
    signature: str
    signed_headers: str
    stamp: str  # X-Amz-Date
    expires: float | None  # a presigned URL's X-Amz-Expires; None for a header
    query: Sequence[tuple[str, str]]  # the query's pairs the signature covers
    token: str | None  # X-Amz-Security-Token


@dataclass(frozen=True, slots=True)
class Verified:
    """A request whose signature holds: who signed it, and for what."""

    access_key_id: str
    region: str
    service: str


def verify(
    request: SignedRequest,
    secret_of: Callable[[str], str | None],
    *,
    region: str,
    services: Sequence[str],
    now: float | None = None,
    max_skew: float = MAX_SKEW_SECONDS,
    presigned: bool = True,
) -> Verified:
    """Check ``request``'s SigV4 signature against ``secret_of(access key id)``.

    Raises:
        SignatureRefused: with AWS's code and words, for every way it fails.
    """
    parts = _parts(request, presigned)
    key_id, date, scope_region, service, _ = parts.credential
    secret = None if parts.token is not None else secret_of(key_id)
    if secret is None:  # an unknown key, or a session token: the node has no STS
        raise SignatureRefused(
            "InvalidClientTokenId", "The security token included in the request is invalid."
        )
    signed = _check_scope(parts, region, services)
    _check_time(parts.stamp, time.time() if now is None else now, max_skew, parts.expires)
    body_hash = _payload_hash(request)
    canonical = _canonical_request(request, parts.query, signed, body_hash)
    scope = f"{date}/{scope_region}/{service}/aws4_request"
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    to_sign = f"{ALGORITHM}\n{parts.stamp}\n{scope}\n{digest}"
    key = _signing_key(secret, date, scope_region, service)
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), parts.signature.encode()):
        raise SignatureRefused("SignatureDoesNotMatch", MISMATCH)
    return Verified(key_id, scope_region, service)


def _parts(request: SignedRequest, presigned: bool) -> _Parts:
    """The signature's parts, from a presigned query or the ``Authorization`` header."""
    query = parse_qsl(request.query, keep_blank_values=True)
    given = dict(query)
    if "X-Amz-Signature" in given or "X-Amz-Algorithm" in given:
        if not presigned:
            raise SignatureRefused("IncompleteSignature", "Presigned requests are not served.")
        signed_query = [(k, v) for k, v in query if k != "X-Amz-Signature"]
        return _presigned_parts(given, signed_query)
    authorization = request.header("authorization")
    if authorization is None:
        raise SignatureRefused(
            "MissingAuthenticationToken", "Request is missing Authentication Token"
        )
    return _header_parts(authorization, request, query)


def _check_scope(parts: _Parts, region: str, services: Sequence[str]) -> list[str]:
    """Refuse a scope or signed headers AWS refuses; return the signed headers' names."""
    _, date, scope_region, service, terminal = parts.credential
    signed = [h.strip().lower() for h in parts.signed_headers.split(";")]
    if "host" not in signed:
        raise SignatureRefused(
            "SignatureDoesNotMatch", "'Host' must be a 'SignedHeader' in the AWS Authorization."
        )
    if parts.expires is None and "x-amz-date" not in signed:
        raise SignatureRefused(
            "SignatureDoesNotMatch",
            "'X-Amz-Date' must be a 'SignedHeader' in the AWS Authorization.",
        )
    if scope_region != region:
        raise SignatureRefused(
            "SignatureDoesNotMatch",
            f"Credential should be scoped to a valid region, not '{scope_region}'.",
        )
    if service not in services:
        raise SignatureRefused(
            "SignatureDoesNotMatch",
            f"Credential should be scoped to correct service: '{services[0]}'.",
        )
    stamp = parts.stamp
    if terminal != "aws4_request" or not _STAMP_PATTERN.fullmatch(stamp) or stamp[:8] != date:
        raise SignatureRefused("SignatureDoesNotMatch", MISMATCH)
    return signed


def _payload_hash(request: SignedRequest) -> str:
    """The body's SHA-256, computed here; ``UNSIGNED-PAYLOAD`` is refused (the body is
    the request), and so is a stated hash the body does not have."""
    stated = request.header("x-amz-content-sha256")
    if stated == UNSIGNED:
        raise SignatureRefused(
            "SignatureDoesNotMatch", "UNSIGNED-PAYLOAD is not accepted: the body is the request."
        )
    body_hash = hashlib.sha256(request.body).hexdigest()
    if stated is not None and stated != body_hash:
        raise SignatureRefused(
            "SignatureDoesNotMatch",
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
        )
    return body_hash


def _header_parts(
    authorization: str, request: SignedRequest, query: Sequence[tuple[str, str]]
) -> _Parts:
    algorithm, _, rest = authorization.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise SignatureRefused(
            "IncompleteSignature",
            f"Unsupported AWS 'algorithm': '{algorithm[:64]}'",
        )
    fields: dict[str, str] = {}
    for item in rest.split(","):
        name, found, value = item.strip().partition("=")
        if found:
            fields[name] = value.strip()
    missing = [n for n in ("Credential", "Signature", "SignedHeaders") if n not in fields]
    if missing:
        told = " ".join(f"Authorization header requires '{n}' parameter." for n in missing)
        raise SignatureRefused("IncompleteSignature", f"{told} Authorization={authorization[:256]}")
    return _Parts(
        _scope(fields["Credential"]),
        fields["Signature"],
        fields["SignedHeaders"],
        request.header("x-amz-date") or "",
        None,
        query,
        request.header("x-amz-security-token"),
    )


def _presigned_parts(given: Mapping[str, str], query: Sequence[tuple[str, str]]) -> _Parts:
    if given.get("X-Amz-Algorithm") != ALGORITHM:
        raise SignatureRefused(
            "IncompleteSignature",
            f"Unsupported AWS 'algorithm': '{given.get('X-Amz-Algorithm', '')[:64]}'",
        )
    names = ("X-Amz-Credential", "X-Amz-Signature", "X-Amz-SignedHeaders", "X-Amz-Date")
    missing = [n for n in names if n not in given]
    if missing:
        told = " ".join(f"AWS query-string parameters must include '{n}'." for n in missing)
        raise SignatureRefused("IncompleteSignature", told + " Re-examine the query-string.")
    try:
        expires = float(given.get("X-Amz-Expires", MAX_SKEW_SECONDS))
    except ValueError:
        expires = -1
    if not 0 < expires <= MAX_PRESIGNED_SECONDS:
        raise SignatureRefused(
            "IncompleteSignature",
            f"X-Amz-Expires must be between 1 and {MAX_PRESIGNED_SECONDS} seconds.",
        )
    return _Parts(
        _scope(given["X-Amz-Credential"]),
        given["X-Amz-Signature"],
        given["X-Amz-SignedHeaders"],
        given["X-Amz-Date"],
        expires,
        query,
        given.get("X-Amz-Security-Token"),
    )


def _scope(credential: str) -> tuple[str, str, str, str, str]:
    parts = credential.split("/")
    if len(parts) != 5 or not all(parts):
        raise SignatureRefused(
            "IncompleteSignature",
            f"Credential must have exactly 5 slash-delimited elements, e.g. "
            f"keyid/date/region/service/term, got '{credential[:128]}'",
        )
    return parts[0], parts[1], parts[2], parts[3], parts[4]


def _check_time(stamp: str, clock: float, max_skew: float, expires: float | None) -> None:
    """Refuse a date more than ``max_skew`` ahead of the node's clock, and a signature
    past its life: ``max_skew`` for a header, ``X-Amz-Expires`` for a presigned URL."""
    signed_at = _seconds(stamp)
    minutes = f"{max_skew / 60:g} min."
    if signed_at > clock + max_skew:
        raise SignatureRefused(
            "SignatureDoesNotMatch",
            f"Signature not yet current: {stamp} is still later than "
            f"{_stamp(clock + max_skew)} ({_stamp(clock)} + {minutes})",
        )
    life, told = (max_skew, minutes) if expires is None else (expires, f"{expires:g} sec.")
    if clock > signed_at + life:
        raise SignatureRefused(
            "SignatureDoesNotMatch",
            f"Signature expired: {stamp} is now earlier than "
            f"{_stamp(clock - life)} ({_stamp(clock)} - {told})",
        )


def _seconds(stamp: str) -> int:
    """``X-Amz-Date`` (``20261207T123456Z``, its shape checked) in epoch seconds."""
    return calendar.timegm(
        (
            int(stamp[:4]),
            int(stamp[4:6]),
            int(stamp[6:8]),
            int(stamp[9:11]),
            int(stamp[11:13]),
            int(stamp[13:15]),
            0,
            0,
            0,
        )
    )


def _stamp(seconds: float) -> str:
    return time.strftime(_STAMP, time.gmtime(seconds))


def _canonical_request(
    request: SignedRequest,
    query: Sequence[tuple[str, str]],
    signed: Sequence[str],
    body_hash: str,
) -> str:
    """AWS's canonical request: for these services the path is encoded once more over
    what was sent, the query's pairs encoded and sorted, the signed headers' values
    trimmed with inner runs of spaces folded to one."""
    path = quote(request.path or "/", safe="/~")
    pairs = sorted((quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in query)
    canonical_query = "&".join(f"{k}={v}" for k, v in pairs)
    lines = []
    for name in signed:
        value = request.header(name)
        lines.append(f"{name}:{_SPACES.sub(' ', value or '').strip()}\n")
    return "\n".join(
        [
            request.method.upper(),
            path,
            canonical_query,
            "".join(lines),
            ";".join(signed),
            body_hash,
        ]
    )


@functools.lru_cache(maxsize=1024)
def _signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """The key a day's signatures of one service and region are made with (the same for
    every request of that day: derived once)."""
    key = f"AWS4{secret}".encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key
