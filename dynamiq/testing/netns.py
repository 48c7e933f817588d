"""Nodes in network namespaces of their own, and the network faults between them.

Each node gets a namespace with one veth link to a bridge, and an address
in a private test range (``10.213.0.0/24``) that exists only on that bridge;
this process reaches every node through the bridge (its address there is
``.1``), so clients keep reaching all nodes whatever the nodes' links do.
Faults are nftables rules inside the nodes' namespaces, on the traffic
between node addresses only:

- ``isolate(name)``: nothing passes between ``name`` and the others;
- ``one_way(name)``: what ``name`` sends to the others is dropped, what
  they send reaches it;
- ``lossy(name, percent)``: that share of the packets between ``name`` and
  the others is dropped, at random (a flapping link);
- ``heal()``: every rule goes.

Needs root on Linux with ``ip`` (iproute2) and ``nft``; ``available()`` says
whether this machine has them. Everything made is removed by ``down()``.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from collections.abc import Sequence

__all__ = ["Network", "available"]

SUBNET = "10.213.0"
_TABLE = "dynamiq_chaos"
_made = itertools.count()  # networks made by this process: each has its own names


def available() -> str | None:
    """Return why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


class Network:
    """A bridge, and one namespace per node name joined to it."""

    def __init__(self, names: Sequence[str]) -> None:
        tag = f"{os.getpid() % 0xFFFF:04x}{next(_made) % 0xFF:02x}"
        self._bridge = f"dq{tag}br"
        self._names = list(names)
        self._ns = {name: f"dq{tag}{name}" for name in names}
        self._addresses = {name: f"{SUBNET}.{10 + i}" for i, name in enumerate(names)}
        self._made: list[tuple[str, str]] = []  # (namespace, link) made, for down()

    def address(self, name: str) -> str:
        """The node's address on the bridge."""
        return self._addresses[name]

    def prefix(self, name: str) -> list[str]:
        """The command prefix that runs a program in the node's namespace."""
        return ["ip", "netns", "exec", self._ns[name]]

    def up(self) -> Network:
        """Make the bridge and the namespaces, with every link up and no rule."""
        try:
            _run("ip", "link", "add", self._bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{SUBNET}.1/24", "dev", self._bridge)
            _run("ip", "link", "set", self._bridge, "up")
            for i, name in enumerate(self._names):
                ns, host_end = self._ns[name], f"{self._bridge[:-2]}v{i}"
                _run("ip", "netns", "add", ns)
                self._made.append((ns, host_end))
                _run("ip", "-n", ns, "link", "set", "lo", "up")
                _run(
                    "ip",
                    "link",
                    "add",
                    host_end,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    ns,
                )
                _run("ip", "link", "set", host_end, "master", self._bridge, "up")
                _run("ip", "-n", ns, "addr", "add", f"{self._addresses[name]}/24", "dev", "eth0")
                _run("ip", "-n", ns, "link", "set", "eth0", "up")
                self._nft(name, f"add table inet {_TABLE}")
                for chain, hook in (("in", "input"), ("out", "output")):
                    self._nft(
                        name,
                        f"add chain inet {_TABLE} {chain} "
                        f"{{ type filter hook {hook} priority 0 ; policy accept ; }}",
                    )
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Remove the namespaces and the bridge (their links go with them)."""
        for ns, link in self._made:
            for argv in (["ip", "link", "del", link], ["ip", "netns", "del", ns]):
                subprocess.run(argv, capture_output=True, check=False)
        self._made.clear()
        subprocess.run(["ip", "link", "del", self._bridge], capture_output=True, check=False)

    def _others(self, name: str) -> str:
        return "{ " + ", ".join(a for n, a in self._addresses.items() if n != name) + " }"

    def _nft(self, name: str, rule: str) -> None:
        _run(*self.prefix(name), "nft", rule)

    def isolate(self, name: str) -> None:
        """Drop everything between ``name`` and the other nodes, both ways."""
        others = self._others(name)
        self._nft(name, f"add rule inet {_TABLE} in ip saddr {others} drop")
        self._nft(name, f"add rule inet {_TABLE} out ip daddr {others} drop")

    def one_way(self, name: str) -> None:
        """Drop what ``name`` sends to the other nodes; what they send still arrives."""
        self._nft(name, f"add rule inet {_TABLE} out ip daddr {self._others(name)} drop")

    def lossy(self, name: str, percent: int) -> None:
        """Drop ``percent`` of the packets between ``name`` and the others, at random."""
        others, random = self._others(name), f"numgen random mod 100 < {percent}"
        self._nft(name, f"add rule inet {_TABLE} in ip saddr {others} {random} drop")
        self._nft(name, f"add rule inet {_TABLE} out ip daddr {others} {random} drop")

    def heal(self) -> None:
        """Remove every fault."""
        for name in self._names:
            for chain in ("in", "out"):
                self._nft(name, f"flush chain inet {_TABLE} {chain}")
