"""The one exception tree: every error has a stable code and an HTTP status."""

from __future__ import annotations

__all__ = [
    "BackendUnavailable",
    "BadRequest",
    "ClientError",
    "ConfigError",
    "DiskLow",
    "DynamiqError",
    "Forbidden",
    "Invalid",
    "MessageNotFound",
    "MethodNotAllowed",
    "NoMajority",
    "NotFound",
    "Overloaded",
    "PayloadTooLarge",
    "PeerUnavailable",
    "QueueExists",
    "QueueInUse",
    "QueueNotFound",
    "RedriveRunning",
    "RequestTimeout",
    "RetryLater",
    "ServerError",
    "TooManyRequests",
    "TopicExists",
    "TopicNotFound",
    "Unauthorized",
    "UnsupportedMediaType",
    "error_for_code",
]


class DynamiqError(Exception):
    """Root of every error Dynamiq raises on purpose.

    Attributes:
        code: a stable UPPER_SNAKE identifier, sent as ``error`` in HTTP bodies.
        status: the HTTP status this error is rendered with.
        message: a sentence for people.
    """

    code = "INTERNAL"
    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ClientError(DynamiqError):
    """Raised when a request is wrong; retrying it unchanged cannot succeed."""

    code = "BAD_REQUEST"
    status = 400


class BadRequest(ClientError):
    """Raised when a body cannot be parsed at all (malformed JSON)."""

    code = "BAD_REQUEST"
    status = 400


class Invalid(ClientError):
    """Raised when input parses but breaks a rule (type, range, name, batch size).

    Attributes:
        field: the offending field or path segment, when one is to blame.
    """

    code = "INVALID"
    status = 422

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class Unauthorized(ClientError):
    """Raised when a request carries no key, or one that is wrong or revoked."""

    code = "UNAUTHORIZED"
    status = 401


class Forbidden(ClientError):
    """Raised when a request's credentials do not allow what it asks: a role that does
    not take the route, a name outside the key's application, a peer's route."""

    code = "FORBIDDEN"
    status = 403


class RetryLater(DynamiqError):
    """An error that tells the client when to try again (HTTP ``Retry-After``).

    Attributes:
        retry_after: seconds a client should wait before retrying.
    """

    retry_after = 1  # also what an error rebuilt from a response without the header says

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TooManyRequests(RetryLater, ClientError):
    """Raised when a client goes past a rate: its key's requests per second, or the
    failed attempts allowed from its address."""

    code = "TOO_MANY_REQUESTS"
    status = 429


class QueueFull(TooManyRequests):
    """Raised when a publish would take a queue past its ``max_depth``: nothing of it
    is stored (reject-publish); consumers make room."""

    code = "QUEUE_FULL"


class PayloadTooLarge(ClientError):
    """Raised when a request body is larger than ``limits.maxbodybytes``."""

    code = "PAYLOAD_TOO_LARGE"
    status = 413


class RequestTimeout(ClientError):
    """Raised when a request's body does not arrive within ``limits.bodytimeout``."""

    code = "REQUEST_TIMEOUT"
    status = 408


class UnsupportedMediaType(ClientError):
    """Raised when a JSON route is sent a body that does not say it is JSON."""

    code = "UNSUPPORTED_MEDIA_TYPE"
    status = 415


class MethodNotAllowed(ClientError):
    """Raised when a route exists but not for the request's method.

    Attributes:
        allowed: the methods the route takes, for the ``Allow`` header.
    """

    code = "METHOD_NOT_ALLOWED"
    status = 405

    def __init__(self, method: str, allowed: frozenset[str] = frozenset()) -> None:
        super().__init__(f"method {method} is not allowed here")
        self.allowed = allowed


class NotFound(ClientError):
    """Raised when a named thing does not exist."""

    code = "NOT_FOUND"
    status = 404


class QueueNotFound(NotFound):
    """Raised when a queue is named that was never created (or was deleted)."""

    code = "QUEUE_NOT_FOUND"

    def __init__(self, queue: str) -> None:
        super().__init__(f"There is no queue named {queue}")
        self.queue = queue


class TopicNotFound(NotFound):
    """Raised when a topic is named that was never created (or was deleted)."""

    code = "TOPIC_NOT_FOUND"

    def __init__(self, topic: str) -> None:
        super().__init__(f"There is no topic named {topic}")
        self.topic = topic


class MessageNotFound(NotFound):
    """Raised when a message id is not stored in the queue."""

    code = "MESSAGE_NOT_FOUND"

    def __init__(self, queue: str, message_id: int) -> None:
        super().__init__(f"There is no message {message_id} in queue {queue}")
        self.queue = queue
        self.message_id = message_id


class QueueExists(ClientError):
    """Raised when creating a queue whose name is taken."""

    code = "QUEUE_EXISTS"
    status = 409

    def __init__(self, queue: str) -> None:
        super().__init__("Queue already exists.")
        self.queue = queue


class TopicExists(ClientError):
    """Raised when creating a topic whose name is taken."""

    code = "TOPIC_EXISTS"
    status = 409

    def __init__(self, topic: str) -> None:
        super().__init__("Topic already exists.")
        self.topic = topic


class QueueInUse(ClientError):
    """Raised when deleting a queue that another queue names as its dead-letter queue."""

    code = "QUEUE_IN_USE"
    status = 409

    def __init__(self, queue: str, users: list[str]) -> None:
        super().__init__(f"Queue {queue!r} is the dead-letter queue of {', '.join(users)}.")
        self.queue = queue
        self.users = users


class RedriveRunning(ClientError):
    """Raised when starting a redrive of a queue whose redrive is still running."""

    code = "REDRIVE_RUNNING"
    status = 409

    def __init__(self, queue: str, task: str) -> None:
        super().__init__(f"Redrive {task} of {queue!r} is still running; cancel it first.")
        self.queue = queue
        self.task = task


class ProtocolMismatch(ClientError):
    """Raised for a peer call from a node that speaks another cluster protocol (another
    release, mid-way through a rolling restart)."""

    code = "PROTOCOL_MISMATCH"
    status = 409


class ServerError(DynamiqError):
    """Raised when Dynamiq itself fails; the request may succeed later."""

    code = "INTERNAL"
    status = 500


class BackendUnavailable(RetryLater, ServerError):
    """Raised when the store cannot take or serve a request right now."""

    code = "BACKEND_UNAVAILABLE"
    status = 503


class NoMajority(BackendUnavailable):
    """Raised when this node is not in touch with a majority of its cluster's members:
    it leases nothing (the majority may be serving its slice)."""

    code = "NO_MAJORITY"

    def __init__(self, live: int, known: int, retry_after: int = 1) -> None:
        super().__init__(
            f"this node reaches {live} of the cluster's {known} members, not a majority: "
            "it serves no receives now; another node may",
            retry_after,
        )


class Overloaded(BackendUnavailable):
    """Raised when this node holds as much as its limits allow (waiting receives,
    request bodies): another node, or this one a moment later, takes the request."""

    code = "OVERLOADED"


class DiskLow(BackendUnavailable):
    """Raised for a publish while the data directory's disk has less free space than
    ``limits.diskfreelimit``: consumers are still served, and their deletes make room."""

    code = "DISK_LOW"


class PeerUnavailable(ServerError):
    """Raised when another cluster member does not answer, or answers with an error.

    Attributes:
        member: the name of the member asked.
        peer_status: its HTTP status, 0 when it did not answer at all.
    """

    code = "PEER_UNAVAILABLE"
    status = 503

    def __init__(self, member: str, why: str, peer_status: int = 0) -> None:
        super().__init__(f"peer {member}: {why}")
        self.member = member
        self.peer_status = peer_status


class ConfigError(DynamiqError):
    """Raised at start-up when a setting is unknown or has a bad value.

    Attributes:
        detail: what is wrong, without the key and source.
        key: ``section.key`` of the setting, when one is to blame.
        source: where the value came from (``file:line``, an env var, a flag).
    """

    code = "CONFIG"
    status = 500

    def __init__(self, message: str, key: str | None = None, source: str | None = None) -> None:
        where = f"{source}: " if source else ""
        what = f"{key}: " if key else ""
        super().__init__(f"{where}{what}{message}")
        self.detail = message
        self.key = key
        self.source = source


def _all_codes() -> dict[str, type[DynamiqError]]:
    found: dict[str, type[DynamiqError]] = {}
    stack: list[type[DynamiqError]] = [DynamiqError]
    while stack:
        cls = stack.pop()
        found.setdefault(cls.code, cls)
        stack.extend(cls.__subclasses__())
    return found


def error_for_code(code: str, message: str, status: int) -> DynamiqError:
    """Rebuild an error received over HTTP.

    Args:
        code: the ``error`` field of the envelope.
        message: the ``message`` field.
        status: the HTTP status of the response.

    Returns:
        An instance of the class that owns ``code`` carrying ``message`` (its
        structured fields are not sent over HTTP), or of ``ClientError`` /
        ``ServerError`` by ``status`` when the code is unknown.
    """
    cls = _all_codes().get(code)
    if cls is None:
        cls = ClientError if 400 <= status < 500 else ServerError
    err = cls.__new__(cls)
    DynamiqError.__init__(err, message)
    err.code, err.status = code, status
    return err
