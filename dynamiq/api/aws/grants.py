"""Who may call which SQS and SNS action on what: a key's role as its identity policy,
a queue's or a topic's ``Policy`` as the resource's, decided by ``access.policy``.

Each action names the access it needs (``roles.Access``); a role's identity
policy allows, on every resource, the actions its access covers. The batch
actions are governed by their single-message permission, as AWS documents
(``SendMessageBatch`` by ``sqs:SendMessage``, ``PublishBatch`` by ``sns:Publish``).
Some actions reach only the caller's own queues whatever a policy says, as on
AWS (``OWN_ONLY``).
"""

from __future__ import annotations

import datetime
import functools
import time
from dataclasses import dataclass

from dynamiq.access.policy import (
    Decision,
    Policy,
    PolicyError,
    Request,
    Statement,
    evaluate,
    parse,
)
from dynamiq.access.roles import ANYONE, GRANTS, SEPARATOR, Access, Principal
from dynamiq.api.aws.accounts import Accounts
from dynamiq.api.aws.errors import AwsError, SnsError
from dynamiq.models import QueueRecord, topic_arn

__all__ = [
    "OWN_ONLY",
    "Caller",
    "Deliveries",
    "Seen",
    "action_of",
    "identity_of",
]

_R, _P, _C, _M = Access.READ, Access.PRODUCE, Access.CONSUME, Access.MANAGE


def _actions(*rows: tuple[str, Access, str | None]) -> dict[str, tuple[Access, str]]:
    """action -> (the access it needs, the action a policy names it by: its own name
    unless another is given)."""
    return {name: (access, policy_name or name) for name, access, policy_name in rows}


# By service, each action's access and policy name.
_ACTIONS: dict[str, dict[str, tuple[Access, str]]] = {
    "sqs": _actions(
        ("CreateQueue", _M, None),
        ("GetQueueUrl", _R, None),
        ("ListQueues", _R, None),
        ("DeleteQueue", _M, None),
        ("PurgeQueue", _M, None),
        ("GetQueueAttributes", _R, None),
        ("SetQueueAttributes", _M, None),
        ("ListDeadLetterSourceQueues", _R, None),
        ("TagQueue", _M, None),
        ("UntagQueue", _M, None),
        ("ListQueueTags", _R, None),
        ("SendMessage", _P, None),
        ("SendMessageBatch", _P, "SendMessage"),
        ("ReceiveMessage", _C, None),
        ("DeleteMessage", _C, None),
        ("DeleteMessageBatch", _C, "DeleteMessage"),
        ("ChangeMessageVisibility", _C, None),
        ("ChangeMessageVisibilityBatch", _C, "ChangeMessageVisibility"),
        ("StartMessageMoveTask", _M, None),
        ("ListMessageMoveTasks", _R, None),
        ("CancelMessageMoveTask", _M, None),
        ("AddPermission", _M, None),
        ("RemovePermission", _M, None),
    ),
    "sns": _actions(
        ("CreateTopic", _M, None),
        ("DeleteTopic", _M, None),
        ("ListTopics", _R, None),
        ("GetTopicAttributes", _R, None),
        ("SetTopicAttributes", _M, None),
        ("TagResource", _M, None),
        ("UntagResource", _M, None),
        ("ListTagsForResource", _R, None),
        ("AddPermission", _M, None),
        ("RemovePermission", _M, None),
        ("Subscribe", _M, None),
        ("ConfirmSubscription", _M, None),
        ("Unsubscribe", _M, None),
        ("GetSubscriptionAttributes", _R, None),
        ("SetSubscriptionAttributes", _M, None),
        ("ListSubscriptions", _R, None),
        ("ListSubscriptionsByTopic", _R, None),
        ("Publish", _P, None),
        ("PublishBatch", _P, "Publish"),
    ),
}
# Actions on the caller's own queues and topics only, whatever a policy allows (AWS's list
# for SQS; for SNS, making and listing).
OWN_ONLY = frozenset(
    {
        ("sqs", a)
        for a in (
            "AddPermission",
            "CancelMessageMoveTask",
            "CreateQueue",
            "DeleteQueue",
            "ListMessageMoveTasks",
            "ListQueues",
            "ListQueueTags",
            "RemovePermission",
            "SetQueueAttributes",
            "StartMessageMoveTask",
            "TagQueue",
            "UntagQueue",
        )
    }
    | {("sns", a) for a in ("CreateTopic", "ListTopics", "ListSubscriptions")}
)
SNS_SERVICE = "sns.amazonaws.com"


def action_of(service: str, name: str) -> tuple[Access, str]:
    """The access and policy name of action ``name`` of ``service``."""
    return _ACTIONS[service][name]


@functools.lru_cache(maxsize=len(GRANTS))
def identity_of(role: str) -> Policy:
    """The identity policy of a key of ``role``: the actions its access covers, anywhere."""
    grants = GRANTS[role]
    allowed = sorted(
        {
            f"{service}:{policy_name}"
            for service, actions in _ACTIONS.items()
            for access, policy_name in actions.values()
            if access in grants
        }
    )
    return Policy((Statement(True, tuple(allowed), False, ("*",), False, None, False, ()),))


@functools.lru_cache(maxsize=1024)
def _resource_policy(text: str) -> Policy | None:
    try:
        return parse(text)
    except PolicyError:  # kept before policies were read: it allows nothing
        return None


@dataclass(frozen=True, slots=True)
class Seen:
    """What the node saw of a signed request that a policy's conditions may ask about."""

    secure: bool  # over TLS (as the socket, or a trusted proxy, says)
    source_ip: str
    user_agent: str
    at: float  # epoch seconds


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls the endpoint, and what the node saw of the request."""

    principal: Principal = ANYONE
    account: str = "000000000000"  # the caller's own
    signed: bool = False  # False: keys are off, or the endpoint is open: nothing is evaluated
    seen: Seen | None = None

    def context(self) -> dict[str, str]:
        """The request's context, as conditions read it (lower-case keys)."""
        seen = self.seen
        if seen is None:
            return {}
        return {
            "aws:securetransport": "true" if seen.secure else "false",
            "aws:sourceip": seen.source_ip,
            "aws:useragent": seen.user_agent,
            "aws:principalaccount": self.account,
            "aws:principalarn": self.arn,
            "aws:principaltype": "User",
            **_times(seen.at),
        }

    @property
    def arn(self) -> str:
        return f"arn:aws:iam::{self.account}:user/{self.principal.name}"

    def own(self, owner: str) -> bool:
        """Whether a queue or topic of account ``owner`` is this caller's own."""
        return self.principal.application is None or owner == self.account

    def authorize(
        self, service: str, action: str, arn: str, owner: str, policy: str | None
    ) -> None:
        """Raise AWS's refusal unless this caller may do ``action`` on ``arn``, of
        account ``owner``, whose own policy is ``policy`` (None: none)."""
        if not self.signed:
            return
        _, policy_name = action_of(service, action)
        same = self.own(owner)
        if not same and (service, action) in OWN_ONLY:
            raise _refused(service, self.arn, policy_name, arn, "identity")
        resource = None if policy is None else _resource_policy(policy)
        context = self.context() if resource is not None and resource.conditional else {}
        request = Request(f"{service}:{policy_name}", arn, self.account, self.arn, context=context)
        decision = evaluate(
            request, [identity_of(self.principal.role)], resource, same_account=same
        )
        if decision is Decision.EXPLICIT_DENY:
            raise _refused(service, self.arn, policy_name, arn, "explicit")
        if decision is not Decision.ALLOW:
            raise _refused(
                service, self.arn, policy_name, arn, "resource" if not same else "identity"
            )


class Deliveries:
    """A topic's deliveries into queues of other applications, decided as AWS decides
    them: SNS (``sns.amazonaws.com``) sends into the queue only where the queue's policy
    lets it (``aws:SourceArn``, ``aws:SourceAccount``); within one application, a topic
    delivers into its queues without a policy (unlike AWS: its owner subscribed them)."""

    def __init__(self, region: str, accounts: Accounts, internal_prefix: str) -> None:
        self._region = region
        self._accounts = accounts
        self._internal = internal_prefix  # the node's own queues (a push subscription's)

    def foreign(self, topic: str, queues: list[str]) -> list[str]:
        application, found, _ = topic.rpartition(SEPARATOR)
        if found:  # another application's queues, or those named without one
            own = application + SEPARATOR
            return [q for q in queues if not q.startswith((own, self._internal))]
        return [q for q in queues if SEPARATOR in q]  # a topic without an application's

    def admits(self, topic: str, queue: QueueRecord) -> bool:
        owner, short = self._accounts.address(topic)
        account, name = self._accounts.address(queue.name)
        policy = (queue.settings.sqs_attributes or {}).get("Policy")
        if policy is None:
            return False
        request = Request(
            "sqs:SendMessage",
            f"arn:aws:sqs:{self._region}:{account}:{name}",
            None,
            service=SNS_SERVICE,
            context={
                "aws:sourcearn": topic_arn(self._region, owner, short),
                "aws:sourceaccount": owner,
                "aws:sourceowner": owner,
                **_times(time.time()),
            },
        )
        resource = _resource_policy(policy)
        return evaluate(request, [], resource, same_account=False) is Decision.ALLOW


def _refused(service: str, who: str, action: str, arn: str, why: str) -> AwsError:
    if service == "sns":
        return SnsError(
            "AuthorizationError",
            f"User: {who} is not authorized to perform: SNS:{action} on resource: {arn}",
        )
    because = {
        "explicit": "with an explicit deny in a resource-based policy",
        "resource": f"because no resource-based policy allows the sqs:{action} action",
        "identity": f"because no identity-based policy allows the sqs:{action} action",
    }[why]
    return AwsError(
        "AccessDenied",
        f"User: {who} is not authorized to perform: sqs:{action} on resource: {arn} {because}",
    )


def _times(at: float) -> dict[str, str]:
    moment = datetime.datetime.fromtimestamp(at, datetime.UTC)
    return {
        "aws:currenttime": moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "aws:epochtime": str(int(at)),
    }
