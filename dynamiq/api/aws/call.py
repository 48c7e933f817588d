"""One SQS or SNS call: the node, where it was reached, and its parameters; and what
an action answers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from dynamiq.api.aws.errors import AwsError
from dynamiq.api.aws.params import Params
from dynamiq.config import SqsSettings
from dynamiq.errors import QueueNotFound
from dynamiq.models import Message, QueueRecord, ReceiveRequest, topic_arn
from dynamiq.service.node import Node

__all__ = ["Action", "Answer", "Call", "Leasing"]


@dataclass(frozen=True, slots=True)
class Leasing:
    """The answer of an action that leases: the endpoint leases as ``ask`` says and
    answers ``render(messages)`` as every receive is answered (``api.delivery``)."""

    ask: ReceiveRequest
    render: Callable[[list[Message]], dict[str, Any]]


Answer = dict[str, Any] | Leasing


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
            raise AwsError("QueueDoesNotExist", "The specified queue does not exist.") from None

    def topic_arn(self, name: str) -> str:
        return topic_arn(self.settings.region, self.settings.account, name)

    def name_of_arn(self, arn: object, param: str, service: str = "sqs") -> str:
        """The queue (or topic) an ARN names."""
        parts = arn.split(":") if isinstance(arn, str) else []
        if len(parts) != 6 or parts[:3] != ["arn", "aws", service] or not parts[5]:
            raise AwsError("InvalidParameterValue", f"Value {arn!r} for {param} is not an ARN.")
        return parts[5]


Action = Callable[[Call], Awaitable[Answer]]
