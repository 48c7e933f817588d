"""Who may do what: roles, the access each route needs, and applications' namespaces.

Every route declares the ``Access`` it needs; a caller's ``Principal`` (its
key's role and application) either grants it or the call is refused with
403. Applications are namespaces: a queue ``orders`` made with a key of the
application ``billing`` is stored as ``billing:orders``, and that key names
it, lists it and sees it named ``orders``; it cannot name another
application's queues at all. Administrators and monitors see every
application and name queues in full (``billing:orders``); so does everyone
when keys are off.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from dynamiq.errors import Forbidden

__all__ = ["ANYONE", "GRANTS", "Access", "Principal", "principal_of"]

SEPARATOR = ":"


class Access(enum.Enum):
    """What a route does, as far as who may call it goes."""

    OPEN = "open"  # nothing to protect: the OpenAPI document, the console's page
    READ = "read"  # list and describe queues and topics, their stats; this node's status
    PRODUCE = "produce"  # publish to a queue or a topic
    CONSUME = "consume"  # receive, delete, change visibility, peek
    MANAGE = "manage"  # create, configure, purge, delete; subscribe; redrive
    MONITOR = "monitor"  # every queue's figures: node stats, metrics
    ADMIN = "admin"  # keys
    PEER = "peer"  # the cluster's own routes: no key, the members' token


_A = Access
GRANTS: dict[str, frozenset[Access]] = {
    "consume": frozenset({_A.OPEN, _A.READ, _A.CONSUME}),
    "produce": frozenset({_A.OPEN, _A.READ, _A.PRODUCE}),
    "produce-consume": frozenset({_A.OPEN, _A.READ, _A.PRODUCE, _A.CONSUME}),
    "manage": frozenset({_A.OPEN, _A.READ, _A.PRODUCE, _A.CONSUME, _A.MANAGE}),
    "monitor": frozenset({_A.OPEN, _A.READ, _A.MONITOR}),
    "admin": frozenset(Access) - {_A.PEER},
}
# Roles that see every application's queues and topics, by their full names.
_EVERY_APPLICATION = frozenset({"admin", "monitor"})


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a key's id, role and application (None: every application)."""

    name: str
    role: str
    application: str | None = None

    def require(self, access: Access) -> None:
        """Raise ``Forbidden`` unless this caller's role allows ``access``."""
        if access not in GRANTS[self.role]:
            raise Forbidden(f"a {self.role} key may not do this ({access.value})")

    def name_of(self, name: str) -> str:
        """Return the full name of the queue or topic this caller calls ``name``.

        Raises:
            Forbidden: ``name`` names another application's queue or topic.
        """
        if self.application is None:
            return name
        if SEPARATOR in name:
            raise Forbidden(
                f"{name!r} is outside this key's application {self.application!r}: "
                "queues and topics are named without their application here"
            )
        return f"{self.application}{SEPARATOR}{name}"

    def shown(self, name: str) -> str:
        """Return the name this caller knows the queue or topic ``name`` by."""
        if self.application is None:
            return name
        return name.removeprefix(self.application + SEPARATOR)

    def sees(self, name: str) -> bool:
        """Whether ``name`` is in this caller's namespace."""
        return self.application is None or name.startswith(self.application + SEPARATOR)

    def visible(self, names: Iterable[str]) -> list[str]:
        """Return the names of ``names`` this caller sees, as it knows them."""
        if self.application is None:  # every name, as it is
            return list(names)
        return [self.shown(n) for n in names if self.sees(n)]


ANYONE = Principal("anyone", "admin")
"""The caller when keys are off (or on an API served without them)."""


def principal_of(key_id: str, role: str, application: str) -> Principal:
    """Return the caller a key stands for."""
    return Principal(key_id, role, None if role in _EVERY_APPLICATION else application)
