"""One SQS call: the node, where it was reached, and its parameters."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from dynamiq.api.sqs.errors import SqsError
from dynamiq.api.sqs.params import Params
from dynamiq.config import SqsSettings
from dynamiq.core.catalog import QueueRecord
from dynamiq.errors import QueueNotFound
from dynamiq.service.node import Node

__all__ = ["Call"]


@dataclass(frozen=True, slots=True)
class Call:
    """An action's view of its request: queue URLs are built from the address the
    client used (``base``), ARNs from the configured region and account."""

    node: Node
    settings: SqsSettings
    base: str  # scheme://host[:port], as the client reached this node
    params: Params

    def queue_url(self, name: str) -> str:
        return f"{self.base}/{self.settings.account}/{name}"

    def queue_arn(self, name: str) -> str:
        return f"arn:aws:sqs:{self.settings.region}:{self.settings.account}:{name}"

    def queue(self, param: str = "QueueUrl") -> QueueRecord:
        """The queue a URL parameter names (its last path segment; any host is fine)."""
        url = self.params.text(param)
        name = urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1] or url
        try:
            return self.node.require_queue(name)
        except QueueNotFound:
            raise SqsError("QueueDoesNotExist", "The specified queue does not exist.") from None

    def name_of_arn(self, arn: object, param: str) -> str:
        """The queue an ARN of this region and account names."""
        parts = arn.split(":") if isinstance(arn, str) else []
        if len(parts) != 6 or parts[:3] != ["arn", "aws", "sqs"] or not parts[5]:
            raise SqsError("InvalidParameterValue", f"Value {arn!r} for {param} is not an ARN.")
        return parts[5]
