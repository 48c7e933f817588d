"""Membership by SWIM gossip over UDP (the ``swim-protocol`` package), behind the port.

The library's traps, and what this adapter does about each:

1. With no peer to ping, its failure detector dies on an assertion and never
   marks anyone offline again (a node started alone, joined later): the
   worker here waits for a peer instead, and the view loop stops the node
   if the worker task ever ends.
2. ``Members.find(exclude=...)`` ignores ``exclude``, so indirect probes often
   go to the suspect itself: ``find`` is overridden to honour it.
3. A notification fired before a listener's poller first runs is lost: the
   view is not built from notifications but re-read every ``VIEW_SECONDS``.
4. Packets are signed pickles and a missing secret signs with the MAC
   address: a secret is required (see ``config``).
5. Both sockets bind with ``reuse_port``, so a second process on the same
   port starts silently: the port is bound exclusively once first, and a
   second node with the same name is refused at start. There is no leave
   message: ``depart`` takes one announced over HTTP.
6. A packet shorter than the library's header (one byte from anyone) raises
   in its unpacking, logged as "Task exception was never retrieved": the
   transport here unpacks with a ``_Pack`` that drops such packets.
7. A member's news is taken from a third party only with a clock above the
   one held, and every process's clock starts at 1: a member restarted under
   its name (a node's worker after SIGTERM) speaks below what its past life
   reached. A third party's word about that past life (offline, its old
   boot id) then overwrote what the member said of itself, for good: one
   member kept it departed while the others served with it, and the
   cluster's slice changes waited on that one forever. Here the clock of
   every update this process makes is at least the time in microseconds, so
   the news of a later life always wins.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import socket
import time
from collections.abc import Mapping, Set
from contextlib import AsyncExitStack
from typing import NoReturn

from swimprotocol.members import Member as SwimMember
from swimprotocol.members import Members
from swimprotocol.packet import Packet
from swimprotocol.status import Status
from swimprotocol.udp import UdpTransport
from swimprotocol.udp.config import UdpConfig
from swimprotocol.udp.pack import UdpPack
from swimprotocol.worker import Worker

from dynamiq.cluster.base import (
    OLDEST_PROTOCOL,
    PROTOCOL,
    FatalHandler,
    Member,
    MemberState,
    ViewListener,
    protocol_of,
    speaks_with,
)
from dynamiq.errors import ConfigError, DynamiqError, ServerError
from dynamiq.keyspace import KeyRange, slices

__all__ = ["SwimMembership", "claim_port", "hold_port"]

log = logging.getLogger("dynamiq.cluster")

VIEW_SECONDS = 0.05  # how often the live set is re-read
JOIN_SECONDS = 5.0  # how long a starting node waits to hear from its seeds


class _Pack(UdpPack):
    """Unpacks as the library does, dropping packets too short to have a header (trap 6)."""

    def unpack(self, data: bytes) -> Packet | None:
        try:
            return super().unpack(data)
        except ValueError:
            return None


class _Transport(UdpTransport):
    """The library's UDP transport with ``_Pack``."""

    def __init__(self, config: UdpConfig, worker: Worker) -> None:
        super().__init__(config, worker)
        self.udp_pack = _Pack(config.signatures)  # type: ignore[misc]


class _Members(Members):
    """``Members`` whose ``find`` honours ``exclude`` (trap 2), and whose updates
    carry a clock of at least the time (trap 7)."""

    def update(
        self,
        member: SwimMember,
        *,
        new_status: Status | None = None,
        new_metadata: Mapping[str, bytes] | None = None,
    ) -> None:
        self._next_clock = max(self._next_clock, time.time_ns() // 1_000)
        super().update(member, new_status=new_status, new_metadata=new_metadata)

    def find(
        self, count: int, *, status: Status = Status.ALL, exclude: Set[SwimMember] = frozenset()
    ) -> frozenset[SwimMember]:
        pool = [m for m in self.get_status(status) if m not in exclude]
        if len(pool) <= count:
            return frozenset(pool)
        return frozenset(secrets.SystemRandom().sample(pool, count))


class _Worker(Worker):
    """A worker whose failure detector waits for a peer instead of dying (trap 1)."""

    async def run_failure_detection(self) -> NoReturn:
        while True:
            for target in self.members.find(1):
                self.run_subtask(self.check(target))
            await asyncio.sleep(self.config.ping_interval)


def claim_port(host: str, port: int) -> int:
    """Bind ``port`` (0: one the OS picks) for UDP and TCP for a moment; return it.

    The library binds with ``reuse_port``, which would let a second process
    share the port silently: an exclusive bind first tells a taken port.
    TCP sockets left in TIME_WAIT by an earlier run of this node do not
    count as taken (``SO_REUSEADDR``); a listener does.

    Raises:
        OSError: the port is held by another socket.
    """
    for _ in range(20):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            udp.bind((host, port))
            chosen: int = udp.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
                tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    tcp.bind((host, chosen))
                except OSError:
                    if port:
                        raise
                    continue  # the OS chose a UDP port whose TCP twin is in use
        return chosen
    raise OSError(f"found no port free for both UDP and TCP on {host}")


def hold_port(host: str, port: int) -> socket.socket:
    """Keep the kernel from giving ``port`` to a connection as its local port; return
    the socket that holds it (bound for TCP, never listening).

    A process restarted on its gossip port needs the port free, and while it
    is down the kernel may pick the port for any outgoing connection: one
    closed from this side then holds it in TIME_WAIT for a minute, and the
    restarted process cannot claim it (``claim_port``). A bound port is never
    picked. Bound with ``SO_REUSEADDR`` and ``SO_REUSEPORT``, the holder lets
    ``claim_port`` and the library's listener bind beside it, and takes no
    connection. UDP is not held: a bound UDP socket would take a share of
    the gossip's datagrams.

    Raises:
        OSError: the port is taken.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class SwimMembership:
    """This node's view of the cluster, kept by SWIM gossip.

    Live members are those ONLINE or SUSPECT (a suspect keeps its slice until
    it is declared offline) whose metadata has arrived, minus those that
    announced their departure. Listeners hear about every change of that set,
    and about this process having been paused (``stalled``), which means
    the others may have served its slice meanwhile.
    """

    def __init__(
        self,
        name: str,
        http: str,
        address: str,
        seeds: list[str],
        secret: str,
        ping_interval: float = 0.2,
        suspect_timeout: float = 1.0,
    ) -> None:
        self._name = name
        self._address = address
        self._seeds = [s for s in dict.fromkeys(seeds) if s != address]
        self._secret = secret
        self._ping_interval = ping_interval
        self._suspect_timeout = suspect_timeout
        self._boot = secrets.token_hex(8)
        self._started_ms = time.time_ns() // 1_000_000
        self._local = Member(name, address.rpartition(":")[0], http, self._boot)
        self._departed: dict[str, str] = {}  # name -> boot id that left
        self._listeners: list[ViewListener] = []
        self._members: Members | None = None
        self._stack = AsyncExitStack()
        self._loop_task: asyncio.Task[None] | None = None
        self._worker_task: asyncio.Task[NoReturn] | None = None
        self._checked = time.monotonic()  # when the view loop last ran
        self._fatal: FatalHandler = _raise
        self._known = frozenset([name])
        self._set_view((self._local,))

    # -- the port ------------------------------------------------------------

    @property
    def address(self) -> str:
        """This node's gossip address, ``host:port`` (the port is known once started)."""
        return self._address

    @property
    def detecting(self) -> bool:
        """Whether the failure detector runs (started and not dead)."""
        return self._worker_task is not None and not self._worker_task.done()

    def local(self) -> Member:
        """Return this node."""
        return self._local

    def members(self) -> list[Member]:
        """Return the live members, sorted by name (this node included)."""
        return list(self._view)

    def slice_of(self, name: str) -> KeyRange:
        """Return the slice of a live member."""
        return self._slices[name]

    def awake(self) -> bool:
        """Whether the view was checked within the suspect timeout: False after a pause
        of this process until the listeners have heard of it."""
        return time.monotonic() - self._checked <= self._suspect_timeout

    def states(self) -> list[MemberState]:
        """Return every member heard of, live or not, with its gossip state."""
        out = [MemberState(self._local, "online")]
        for m in self._members.non_local if self._members else ():
            member = self._member(m)
            if member is not None:
                left = self._departed.get(member.name) == member.boot
                out.append(MemberState(member, "left" if left else m.status.name.lower()))
        return sorted(out, key=lambda s: (s.member.name, s.member.host))

    def known(self) -> frozenset[str]:
        """Return every member heard of that has not left (this node included), and the
        address of each seed not heard from yet."""
        return self._known

    def listen(self, listener: ViewListener) -> None:
        """Call ``listener(members, stalled)`` whenever the live set changes."""
        self._listeners.append(listener)

    def depart(self, name: str, boot: str) -> None:
        """Take a member's word that it is leaving (SWIM has no leave message)."""
        self._departed[name] = boot
        self._refresh()

    # -- lifecycle -----------------------------------------------------------

    async def start(self, on_fatal: FatalHandler) -> None:
        """Bind the gossip port, join the seeds, and check that this node's name is free.

        Later, ``on_fatal`` hears why this node must stop: a node with its
        name showed up after all (``ConfigError``), or the failure detector
        died (``ServerError``).

        Raises:
            ConfigError: the gossip port is taken, or a live node has this name.
        """
        host, _, port = self._address.rpartition(":")
        try:
            self._address = f"{host}:{claim_port(host, int(port))}"
        except OSError as exc:
            raise ConfigError(
                f"gossip port {self._address} is taken ({exc.strerror}): another node?",
                key="core.port",
            ) from None
        self._seeds = [s for s in self._seeds if s != self._address]
        config = UdpConfig(
            local_name=self._address,
            peers=self._seeds,
            secret=self._secret,
            local_metadata={
                "name": self._name.encode(),
                "http": self._local.http.encode(),
                "boot": self._boot.encode(),
                "started": str(self._started_ms).encode(),
                "protocol": str(PROTOCOL).encode(),
            },
            ping_interval=self._ping_interval,
            ping_timeout=min(0.1, self._ping_interval / 2),
            ping_req_timeout=min(0.3, self._ping_interval * 1.5),
            suspect_timeout=self._suspect_timeout,
            sync_interval=min(0.1, self._ping_interval),
        )
        self._members = members = _Members(config)
        worker = _Worker(config, members)
        await self._stack.enter_async_context(_Transport(config, worker))
        self._worker_task = await self._stack.enter_async_context(worker)
        await self._join()
        self._fatal = on_fatal
        self._loop_task = asyncio.create_task(self._view_loop())

    async def stop(self) -> None:
        """Stop gossiping (the others see this node go offline); idempotent."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        await self._stack.aclose()

    async def _join(self) -> None:
        deadline = time.monotonic() + JOIN_SECONDS
        while time.monotonic() < deadline and not self._heard_from_seeds():  # noqa: ASYNC110
            await asyncio.sleep(VIEW_SECONDS)  # gossip arrives with no event to wait on
        self._refresh()
        twin = self._twin()
        if twin is not None:
            raise self._duplicate(twin)

    def _duplicate(self, twin: Member) -> ConfigError:
        return ConfigError(
            f"a live node at {twin.host} ({twin.http}) is already named {self._name!r}; "
            "names must be unique",
            key="core.name",
        )

    def _heard_from_seeds(self) -> bool:
        assert self._members is not None
        return all(
            self._members.get(seed).metadata is not SwimMember.METADATA_UNKNOWN
            for seed in self._seeds
        )

    # -- the view ------------------------------------------------------------

    async def _view_loop(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(VIEW_SECONDS)
            now = time.monotonic()
            stalled = now - last > self._suspect_timeout
            last = now
            if not self.detecting:
                self._fatal(
                    ServerError("the gossip worker stopped; this node can no longer see failures")
                )
                return
            twin = self._twin()
            if twin is not None:
                self._fatal(self._duplicate(twin))
                return
            self._refresh(stalled)
            self._checked = time.monotonic()

    def _refresh(self, stalled: bool = False) -> None:
        self._known = self._count_known()
        live = [self._local]
        for m in self._members.get_status(Status.AVAILABLE) if self._members else ():
            member = self._member(m)
            if (
                member is not None
                and member.name != self._name
                and self._departed.get(member.name) != member.boot
            ):
                live.append(member)
        view = tuple(sorted(live, key=lambda m: m.name))
        if view != self._view or stalled:
            self._set_view(view)
            if stalled:
                log.warning("this process was paused; the others may have served its slice")
            for listener in self._listeners:
                listener(list(view), stalled)

    def _count_known(self) -> frozenset[str]:
        known = {self._name}
        for m in self._members.non_local if self._members else ():
            member = self._member(m)
            if member is None:
                known.add(f"seed {m.name}")  # no name yet: counted by its address
            elif self._departed.get(member.name) != member.boot:
                known.add(member.name)
        return frozenset(known)

    def _set_view(self, view: tuple[Member, ...]) -> None:
        # The slices change only with the view: computed here, not per lookup
        # (a delete in a cluster looks up every member's slice).
        self._view = view
        self._slices = slices(m.name for m in view)

    def _twin(self) -> Member | None:
        """Return a live member with this node's name that started first, if any."""
        if self._members is None:
            return None
        mine = (self._started_ms, self._address)
        for m in self._members.get_status(Status.AVAILABLE):
            member = self._member(m)
            if member is not None and member.name == self._name and member.boot != self._boot:
                started = int(m.metadata.get("started", b"0") or 0)
                if (started, m.name) < mine:
                    return member
        return None

    @staticmethod
    def _member(m: SwimMember) -> Member | None:
        meta = m.metadata
        if "http" not in meta or "name" not in meta:
            return None  # its metadata has not arrived yet
        member = Member(
            meta["name"].decode(),
            m.name.rpartition(":")[0],
            meta["http"].decode(),
            meta.get("boot", b"").decode(),
            protocol_of(meta.get("protocol")),
        )
        if member.protocol != PROTOCOL:
            _another_release(member.name, member.protocol)
        return member


@functools.lru_cache(maxsize=64)
def _another_release(name: str, protocol: int) -> None:
    """Log, once per member and protocol, that a member runs another release."""
    if speaks_with(protocol):
        log.info(
            "member %s speaks cluster protocol %d, this node %d: two releases serve "
            "together until the rolling restart ends",
            name,
            protocol,
            PROTOCOL,
        )
        return
    log.warning(
        "member %s speaks cluster protocol %d, this node %d to %d: the two refuse each "
        "other's peer calls until the cluster runs one release",
        name,
        protocol,
        OLDEST_PROTOCOL,
        PROTOCOL,
    )


def _raise(error: DynamiqError) -> None:
    raise error
