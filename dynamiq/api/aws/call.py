"""One SQS or SNS call: the node, where it was reached, and its parameters; and what
an action answers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from dynamiq.api.aws.accounts import Accounts
from dynamiq.api.aws.errors import AwsError, invalid_parameter
from dynamiq.api.aws.grants import Caller
from dynamiq.api.aws.params import Params
from dynamiq.config import SqsSettings
from dynamiq.errors import QueueNotFound, TopicNotFound
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
    client used (``base``), ARNs from the configured region and each application's
    account (``accounts``); every queue and topic an action reaches is authorized for
    ``caller`` here."""

    node: Node
    settings: SqsSettings
    base: str  # scheme://host[:port], as the client reached this node
    params: Params
    action: str = ""
    service: str = "sqs"
    caller: Caller = field(default_factory=Caller)
    accounts: Accounts = field(default_factory=lambda: Accounts("000000000000", tuple))

    def queue_url(self, name: str) -> str:
        account, short = self.accounts.address(name)
        return f"{self.base}/{account}/{short}"

    def queue_arn(self, name: str) -> str:
        account, short = self.accounts.address(name)
        return f"arn:aws:sqs:{self.settings.region}:{account}:{short}"

    def topic_arn(self, name: str) -> str:
        return topic_arn(self.settings.region, *self.accounts.address(name))

    def owner(self, name: str) -> str:
        """The account a queue or topic (by its full name) belongs to."""
        return self.accounts.address(name)[0]

    @property
    def account(self) -> str:
        """The caller's own account."""
        return self.caller.account

    def queue(self, param: str = "QueueUrl") -> QueueRecord:
        """The queue a URL parameter names (any host is fine; without an account, the
        caller's own), authorized for this call's action."""
        path = urlsplit(self.params.text(param)).path.rstrip("/").split("/")
        short = path[-1] or self.params.text(param)
        account = path[-2] if len(path) >= 2 and path[-2].isdigit() else None
        if param == "QueueName":
            account = self.params.optional_text("QueueOwnerAWSAccountId")
        return self.queue_named(account or self.account, short)

    def queue_named(self, account: str, short: str) -> QueueRecord:
        """The queue ``short`` of ``account``, authorized for this call's action."""
        try:
            record = self.node.require_queue(self._full_name(account, short))
        except QueueNotFound:
            raise AwsError("QueueDoesNotExist", "The specified queue does not exist.") from None
        policy = (record.settings.sqs_attributes or {}).get("Policy")
        arn, owner = self.queue_arn(record.name), self.owner(record.name)
        self.caller.authorize(self.service, self.action, arn, owner, policy)
        return record

    def topic(self, param: str = "TopicArn") -> str:
        """The topic an ARN parameter names, authorized for this call's action."""
        return self.topic_of_arn(self.params.text(param), param)

    def queue_of_arn(self, arn: object, param: str) -> QueueRecord:
        """The queue ``arn`` names, authorized for this call's action."""
        return self.queue_named(*self._arn_parts(arn, param, "sqs"))

    def topic_of_arn(self, arn: str, param: str) -> str:
        """The topic ``arn`` names, authorized for this call's action."""
        full = self._full_name(*self._arn_parts(arn, param, "sns"), "sns")
        policy = (self.node.topic_settings(full).sns_attributes or {}).get("Policy")
        arn, owner = self.topic_arn(full), self.owner(full)
        self.caller.authorize(self.service, self.action, arn, owner, policy)
        return full

    def own(self, name: str) -> str:
        """The full name of a queue or topic the caller makes, authorized."""
        full = self.caller.principal.name_of(name)
        arn = self.topic_arn(full) if self.service == "sns" else self.queue_arn(full)
        self.caller.authorize(self.service, self.action, arn, self.owner(full), None)
        return full

    def listing(self) -> None:
        """Authorize an action on the caller's account as a whole (a listing)."""
        arn = f"arn:aws:{self.service}:{self.settings.region}:{self.account}:*"
        self.caller.authorize(self.service, self.action, arn, self.account, None)

    def visible(self, names: list[str]) -> list[str]:
        """The full names of ``names`` that the caller lists: its own application's."""
        if self.caller.principal.application is None:
            return names
        return [n for n in names if self.caller.principal.sees(n)]

    def name_of_arn(self, arn: object, param: str, service: str = "sqs") -> str:
        """The full name of the queue (or topic) an ARN names (not authorized: a
        parameter naming another resource than the action's own)."""
        account, short = self._arn_parts(arn, param, service)
        return self._full_name(account, short, service)

    def _arn_parts(self, arn: object, param: str, service: str) -> tuple[str, str]:
        parts = arn.split(":") if isinstance(arn, str) else []
        if service == "sns" and len(parts) < 6:  # SNS's own words
            raise invalid_parameter(
                f"{param} Reason: An ARN must have at least 6 elements, not {len(parts)}"
            )
        if len(parts) != 6 or parts[:3] != ["arn", "aws", service] or not parts[5]:
            raise AwsError("InvalidParameterValue", f"Value {arn!r} for {param} is not an ARN.")
        if service == "sns" and parts[3] != self.settings.region:  # another region's topic
            raise invalid_parameter(param)
        return parts[4], parts[5]

    def _full_name(self, account: str, short: str, service: str = "sqs") -> str:
        """The full name of ``short`` in ``account``: ``QueueNotFound`` (or, of a
        topic, ``TopicNotFound``) where no such one exists."""
        full = self.accounts.full_name(account, short)
        if full is None:
            raise TopicNotFound(short) if service == "sns" else QueueNotFound(short)
        if service == "sns":
            self.node.require_topic(full)
        return full


Action = Callable[[Call], Awaitable[Answer]]
