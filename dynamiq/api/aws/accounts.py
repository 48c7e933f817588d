"""Applications as AWS accounts: where a queue's or a topic's full name lives in ARNs and URLs.

Queues and topics of an application are stored as ``<application>:<name>``;
the SQS and SNS endpoint shows them as ``<name>`` in the application's account
(``credentials.account_of``). A name without an application (made while keys
were off, or by an administrator naming it in full) lives in the configured
account (``sqs.account``) under its full name.

An account leads back to its application among the applications the node
knows: its keys' and those its queues' and topics' names hold. Learning them
again costs a pass over every name, so a miss relearns at most once a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from dynamiq.access.credentials import account_of
from dynamiq.access.roles import SEPARATOR

__all__ = ["Accounts"]

RELEARN_EVERY = 1.0  # seconds at least between two passes over every name


class Accounts:
    """The accounts the endpoint's ARNs and URLs name, and their applications."""

    def __init__(self, default: str, known: Callable[[], Iterable[str]]) -> None:
        """``known`` returns the applications (and full names) the node knows now."""
        self.default = default
        self._known = known
        self._applications: dict[str, str] = {}  # account -> application
        self._learned_at = float("-inf")

    def learn_from(self, known: Callable[[], Iterable[str]]) -> None:
        """Learn applications from ``known`` from now on (the catalog, once it is built)."""
        self._known = known
        self._learned_at = float("-inf")

    def of(self, application: str | None) -> str:
        """The account of ``application`` (None: the configured account)."""
        return self.default if application is None else account_of(application)

    def address(self, full: str) -> tuple[str, str]:
        """The account a full name lives in, and its name there."""
        application, found, name = full.partition(SEPARATOR)
        if not found:
            return self.default, full
        self._applications.setdefault(account_of(application), application)
        return account_of(application), name

    def full_name(self, account: str, name: str) -> str | None:
        """The full name of ``name`` in ``account``; None when no application the node
        knows has that account."""
        if account == self.default:
            return name
        application = self._application(account)
        return None if application is None else f"{application}{SEPARATOR}{name}"

    def _application(self, account: str) -> str | None:
        found = self._applications.get(account)
        if found is None and time.monotonic() - self._learned_at >= RELEARN_EVERY:
            self._learned_at = time.monotonic()
            for name in self._known():
                application = name.partition(SEPARATOR)[0]
                self._applications.setdefault(account_of(application), application)
            found = self._applications.get(account)
        return found
