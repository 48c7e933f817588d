"""Which HTTP/S endpoints a node may push to (pure, but for name resolution).

A node makes requests for whoever may subscribe an endpoint, from inside the
network it runs in. So an endpoint's URL is held to rules at ``Subscribe``
(refused there, never later) and each address it resolves to is checked
again when a delivery connects (a name that resolved to a public address at
``Subscribe`` may point inward later):

- ``deny`` (``[push] deny``: host names and CIDRs) is refused, the
  link-local ranges by default (cloud metadata services answer at
  169.254.169.254);
- with ``allow`` set, only what it names may be used;
- the node's own ports (HTTP, gossip) on its own addresses are refused
  whatever the lists say: an endpoint must not be able to call the cluster's
  routes as the node.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from dynamiq.errors import Invalid

__all__ = ["DEFAULT_DENY", "EndpointRules", "Network", "Unreachable", "port_of", "resolve"]

DEFAULT_DENY = "169.254.0.0/16,fe80::/10"
PROTOCOLS = ("http", "https")
MAX_URL = 2048

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Unreachable(Exception):
    """An endpoint did not answer: refused, reset, timed out, or refused by the rules."""


def _refuse(why: str) -> Invalid:
    return Invalid(why, "Endpoint")


@dataclass(frozen=True, slots=True)
class _Names:
    """A list of host names and networks, as ``[push] allow`` or ``deny`` give them."""

    hosts: frozenset[str]
    networks: tuple[Network, ...]

    @classmethod
    def parse(cls, text: str, key: str) -> _Names:
        hosts: set[str] = set()
        networks: list[Network] = []
        for item in (part.strip().lower() for part in text.split(",")):
            if not item:
                continue
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                if not all(c.isalnum() or c in ".-*" for c in item):
                    raise Invalid(f"{item!r} is neither a host name nor a CIDR", key) from None
                hosts.add(item)
        return cls(frozenset(hosts), tuple(networks))

    def __bool__(self) -> bool:
        return bool(self.hosts or self.networks)

    def names(self, host: str) -> bool:
        """Whether ``host`` is named, exactly or under a ``*.domain`` entry."""
        if host in self.hosts:
            return True
        return any(entry.startswith("*.") and host.endswith(entry[1:]) for entry in self.hosts)

    def holds(self, address: Address) -> bool:
        return any(address in network for network in self.networks)


class EndpointRules:
    """The ``[push]`` rules of one node: ``allow`` and ``deny`` lists, and its own
    ``ports`` on its own ``addresses`` (loopback's always among them)."""

    def __init__(
        self,
        allow: str = "",
        deny: str = DEFAULT_DENY,
        ports: Iterable[int] = (),
        addresses: Iterable[str] = (),
    ) -> None:
        self._allow = _Names.parse(allow, "push.allow")
        self._deny = _Names.parse(deny, "push.deny")
        self._ports = frozenset(ports)
        own: set[Address] = set()
        for text in addresses:
            try:
                own.add(ipaddress.ip_address(text.strip("[]")))
            except ValueError:
                continue  # a name: its addresses are not known here
        self._own = frozenset(own)

    def url(self, url: str) -> SplitResult:
        """``url`` split, if it is one a node could push to (``Invalid`` otherwise)."""
        if not isinstance(url, str) or not url or len(url) > MAX_URL:
            raise _refuse(f"must be an http or https URL of at most {MAX_URL} characters")
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            raise _refuse("is not a URL") from None
        if parts.scheme not in PROTOCOLS or not parts.hostname:
            raise _refuse("must be an http or https URL with a host")
        if parts.username is not None or parts.password is not None:
            raise _refuse("must not carry a user name or password")
        if port == 0:
            raise _refuse("has no usable port")
        host = parts.hostname.lower()
        if self._deny.names(host):
            raise _refuse(f"the host {host} is refused here ([push] deny)")
        return parts

    def address(self, host: str, address: str, port: int) -> None:
        """Refuse (``Invalid``) a connection for ``host`` to ``address``:``port``."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if self._deny.holds(ip):
            raise _refuse(f"{host} is at {ip}, which is refused here ([push] deny)")
        if self._allow and not (self._allow.names(host) or self._allow.holds(ip)):
            raise _refuse(f"{host} ({ip}) is not among the endpoints allowed here ([push] allow)")
        if port in self._ports and (ip.is_loopback or ip.is_unspecified or ip in self._own):
            raise _refuse("is one of this node's own ports")

    async def check(self, url: str) -> SplitResult:
        """``url`` split, once every address its host resolves to passes the rules."""
        parts = self.url(url)
        host = parts.hostname or ""
        port = port_of(parts)
        for address in await resolve(host, port):
            self.address(host, address, port)
        return parts


def port_of(parts: SplitResult) -> int:
    """The port a URL connects to: its own, else its scheme's."""
    return parts.port or (443 if parts.scheme == "https" else 80)


async def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to (``Invalid`` when it resolves to none)."""
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise _refuse(f"the host {host} does not resolve") from None
    return sorted({str(info[4][0]) for info in found})
