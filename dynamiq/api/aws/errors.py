"""SQS's and SNS's errors as SDKs parse them: the shape name, the query code, the status.

An AWS JSON error carries the shape in ``__type`` (SDKs map exception
classes from it) and the legacy code in the ``x-amzn-query-error`` header
(what ``Error.Code`` reads); both are always sent. A query-protocol error
carries the code alone, in its XML document. SNS speaks only the query
protocol: its errors are named by their codes. Dynamiq's own errors are
translated here, so that an action raises whichever is natural to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dynamiq.access.sigv4 import SignatureRefused
from dynamiq.errors import (
    BackendUnavailable,
    ClientError,
    DynamiqError,
    Forbidden,
    PayloadTooLarge,
    QueueExists,
    QueueNotFound,
    TooManyRequests,
    TopicNotFound,
    Unauthorized,
)

__all__ = ["AwsError", "SnsError", "invalid_parameter", "sns_error", "sqs_error"]

_QUEUE = "AWS.SimpleQueueService."
# shape: (legacy query code, HTTP status); a shape not listed is its own code, 400.
_CODES: dict[str, tuple[str, int]] = {
    "QueueDoesNotExist": (_QUEUE + "NonExistentQueue", 400),
    "QueueNameExists": ("QueueAlreadyExists", 400),
    "QueueDeletedRecently": (_QUEUE + "QueueDeletedRecently", 400),
    "MessageNotInflight": (_QUEUE + "MessageNotInflight", 400),
    "EmptyBatchRequest": (_QUEUE + "EmptyBatchRequest", 400),
    "TooManyEntriesInBatchRequest": (_QUEUE + "TooManyEntriesInBatchRequest", 400),
    "BatchEntryIdsNotDistinct": (_QUEUE + "BatchEntryIdsNotDistinct", 400),
    "InvalidBatchEntryId": (_QUEUE + "InvalidBatchEntryId", 400),
    "BatchRequestTooLong": (_QUEUE + "BatchRequestTooLong", 400),
    "PurgeQueueInProgress": (_QUEUE + "PurgeQueueInProgress", 403),
    "UnsupportedOperation": (_QUEUE + "UnsupportedOperation", 400),
    "OverLimit": ("OverLimit", 403),
    "ResourceNotFoundException": ("ResourceNotFoundException", 404),
    "InternalFailure": ("InternalFailure", 500),
    "ServiceUnavailable": ("ServiceUnavailable", 503),
    "InvalidAction": ("InvalidAction", 400),
    "AccessDenied": ("AccessDenied", 403),
    "SignatureDoesNotMatch": ("SignatureDoesNotMatch", 403),
    "MissingAuthenticationToken": ("MissingAuthenticationToken", 403),
    "IncompleteSignature": ("IncompleteSignature", 400),
    "InvalidClientTokenId": ("InvalidClientTokenId", 403),
}
# Codes whose JSON shape is named otherwise (as AWS answers, recorded in its SDKs' tests).
_JSON_SHAPES = {
    "InvalidParameterValue": "InvalidParameterValueException",
    "MissingParameter": "MissingRequiredParameterException",
}
# The refusals every AWS service makes alike (not SQS's own shapes): their JSON type is
# named in AWS's common namespace.
COMMON = frozenset(
    {
        "MissingAuthenticationToken",
        "IncompleteSignature",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
    }
)
# SQS's shapes SNS names alike.
_SNS_SHARED = frozenset(
    {
        "EmptyBatchRequest",
        "TooManyEntriesInBatchRequest",
        "BatchEntryIdsNotDistinct",
        "InvalidBatchEntryId",
        "BatchRequestTooLong",
        "InvalidAction",
        "MalformedQueryString",
        "ServiceUnavailable",
        "AccessDenied",
        *COMMON,
    }
)
# SNS's codes whose status is not 400.
_SNS_STATUS = {
    "NotFound": 404,
    "ResourceNotFound": 404,
    "AuthorizationError": 403,
    "AccessDenied": 403,
    "SignatureDoesNotMatch": 403,
    "MissingAuthenticationToken": 403,
    "IncompleteSignature": 400,
    "InvalidClientTokenId": 403,
    "InternalError": 500,
    "ServiceUnavailable": 503,
}


# Where SQS's query protocol words an error its own way (AWS's recorded answers).
_QUERY_WORDS = {"QueueDoesNotExist": "The specified queue does not exist for this wsdl version."}


class AwsError(DynamiqError):
    """An error as SQS names it: ``code`` (``QueueDoesNotExist``), its JSON ``shape``
    (the same, or ``InvalidParameterValueException`` for ``InvalidParameterValue``),
    its legacy ``query_code`` (``AWS.SimpleQueueService.NonExistentQueue``), and whose
    fault it is."""

    def __init__(self, code: str, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.code = code  # what a batch's ``Failed`` entry names
        self.shape = _JSON_SHAPES.get(code, code)
        self.query_code, self.status = _CODES.get(code, (code, 400))
        self.query_message = _QUERY_WORDS.get(code, message)  # the query protocol's
        self.sender = self.status < 500
        self.retry_after = retry_after


class SnsError(AwsError):
    """An error as SNS names it, by its code (``NotFound``, ``InvalidParameter``)."""

    def __init__(self, code: str, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(code, message, retry_after=retry_after)
        self.shape = self.query_code = code
        self.query_message = message
        self.status = _SNS_STATUS.get(code, 400)
        self.sender = self.status < 500


def invalid_parameter(what: str) -> SnsError:
    """SNS's refusal of a parameter: ``Invalid parameter: <what>``."""
    return SnsError("InvalidParameter", f"Invalid parameter: {what}")


def sns_error(error: DynamiqError) -> AwsError:
    """Return any error of Dynamiq's, or of SQS's, as SNS would name it."""
    if isinstance(error, SnsError):
        return error
    if isinstance(error, AwsError):
        fallback = "InvalidParameter" if error.sender else "InternalError"
        return SnsError(error.code if error.code in _SNS_SHARED else fallback, error.message)
    if isinstance(error, SignatureRefused):
        return SnsError(error.code, error.message)
    if isinstance(error, TopicNotFound):
        return SnsError("NotFound", "Topic does not exist")
    if isinstance(error, QueueNotFound):
        return SnsError("NotFound", "Endpoint does not exist")
    return _in_common(error, SnsError, _SNS_WORDS)


def sqs_error(error: DynamiqError) -> AwsError:
    """Return any error of Dynamiq's as SQS would name it."""
    if isinstance(error, AwsError):
        return error
    if isinstance(error, SignatureRefused):
        return AwsError(error.code, error.message)
    if isinstance(error, QueueNotFound):
        return AwsError("QueueDoesNotExist", "The specified queue does not exist.")
    if isinstance(error, QueueExists):
        return AwsError(
            "QueueNameExists", "A queue already exists with the same name and other attributes."
        )
    if isinstance(error, PayloadTooLarge):
        return AwsError("BatchRequestTooLong", error.message)
    return _in_common(error, AwsError, _SQS_WORDS)


@dataclass(frozen=True, slots=True)
class _Words:
    """What one service calls the refusals both services make."""

    throttled: str
    invalid: str
    invalid_prefix: str
    internal: str


_SQS_WORDS = _Words("RequestThrottled", "InvalidParameterValue", "", "InternalFailure")
_SNS_WORDS = _Words("Throttling", "InvalidParameter", "Invalid parameter: ", "InternalError")


def _in_common(error: DynamiqError, kind: type[AwsError], words: _Words) -> AwsError:
    """Return ``error`` as a refusal both services make, in ``words``."""
    if isinstance(error, BackendUnavailable):
        return kind("ServiceUnavailable", error.message, retry_after=error.retry_after)
    if isinstance(error, TooManyRequests):  # a key's rate, a full queue: SDKs retry it
        return kind(words.throttled, error.message, retry_after=error.retry_after)
    if isinstance(error, Forbidden | Unauthorized):
        return kind("AccessDenied", error.message)
    if isinstance(error, ClientError):
        return kind(words.invalid, words.invalid_prefix + error.message)
    return kind(words.internal, error.message)
