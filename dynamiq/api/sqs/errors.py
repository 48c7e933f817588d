"""SQS's errors as SDKs parse them: the shape name, the legacy query code, the status.

An AWS JSON error carries the shape in ``__type`` (SDKs map exception
classes from it) and the legacy code in the ``x-amzn-query-error`` header
(what ``Error.Code`` reads); both are always sent. Dynamiq's own errors are
translated here, so that an action raises whichever is natural to it.
"""

from __future__ import annotations

from dynamiq.errors import (
    BackendUnavailable,
    ClientError,
    DynamiqError,
    PayloadTooLarge,
    QueueExists,
    QueueNotFound,
)

__all__ = ["SqsError", "sqs_error"]

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
}


class SqsError(DynamiqError):
    """An error as SQS names it: ``shape`` (``QueueDoesNotExist``), its legacy ``query_code``
    (``AWS.SimpleQueueService.NonExistentQueue``), and whose fault it is."""

    def __init__(self, shape: str, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.shape = shape
        self.query_code, self.status = _CODES.get(shape, (shape, 400))
        self.code = shape
        self.sender = self.status < 500
        self.retry_after = retry_after


def sqs_error(error: DynamiqError) -> SqsError:
    """Return any error of Dynamiq's as SQS would name it."""
    if isinstance(error, SqsError):
        return error
    if isinstance(error, QueueNotFound):
        return SqsError("QueueDoesNotExist", "The specified queue does not exist.")
    if isinstance(error, QueueExists):
        return SqsError(
            "QueueNameExists", "A queue already exists with the same name and other attributes."
        )
    if isinstance(error, PayloadTooLarge):
        return SqsError("BatchRequestTooLong", error.message)
    if isinstance(error, BackendUnavailable):
        return SqsError("ServiceUnavailable", error.message, retry_after=error.retry_after)
    if isinstance(error, ClientError):
        return SqsError("InvalidParameterValue", error.message)
    return SqsError("InternalFailure", error.message)
