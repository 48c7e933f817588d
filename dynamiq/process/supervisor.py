"""A node served by several worker processes (``core.workers``): start them, keep
them running, stop them.

One Python process uses one core. With ``core.workers = N`` the node's
supervisor forks N workers; each listens on the node's HTTP port with
``SO_REUSEPORT``, so the kernel spreads new connections between them, and
each is a member of the cluster (``node/0``, ``node/1``...), so the node's
slice is split between its workers and no message is leased by two of them;
a receive one cannot fill continues into the others' shares, and a worker
that is killed leaves its leases to lapse, as a node does. A node alone has
its workers gossip with each other on loopback under a secret made at start.

The supervisor serves nothing itself. Before forking it reserves the node's
port (bound with ``SO_REUSEPORT``, never listening, so no connection waits
on it), binds each worker's socket for the peers and picks its gossip port,
which it holds while the worker is down (``hold_port``): a worker started
again sits where it sat, and the others reach it where they did. A worker
that exits is started again after a pause that doubles while it keeps
failing soon after its start. SIGTERM and SIGINT stop every worker
gracefully (a second signal kills them), SIGHUP is passed on (certificates
reload), and kill -9 of the supervisor takes its workers with it
(``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import secrets
import select
import signal
import socket
import time
from dataclasses import dataclass

from dynamiq.cluster.board import Board
from dynamiq.cluster.swim import claim_port, hold_port
from dynamiq.config import Settings
from dynamiq.errors import ConfigError, DynamiqError
from dynamiq.keyspace import worker_name
from dynamiq.logs import label_process
from dynamiq.process.daemon import announce, listen, run, serve
from dynamiq.process.seat import Seat, url_of

__all__ = ["supervise"]

log = logging.getLogger("dynamiq.process.supervisor")

SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD}
TICK_SECONDS = 0.1  # how often the supervisor looks at its workers without a signal
READY_SECONDS = 60.0  # how long the workers may take to serve, at the node's start
FIRST_PAUSE_SECONDS = 0.2  # before a failed worker is started again; doubled while it
LONGEST_PAUSE_SECONDS = 5.0  # keeps failing within STEADY_SECONDS of its start
STEADY_SECONDS = 10.0
PR_SET_PDEATHSIG = 1


@dataclass
class _Worker:
    seat: Seat
    pid: int = 0  # 0: not running
    ready: int = -1  # the pipe it writes to once it serves (-1: closed)
    served: bool = False  # it said it serves, this start or an earlier one
    started: float = 0.0
    pause: float = FIRST_PAUSE_SECONDS
    due: float = 0.0  # when to start it again (0: not waiting to)


def supervise(settings: Settings, count: int) -> int:
    """Serve the node with ``count`` worker processes until stopped; return the exit
    status (2: a worker could not start as configured, 1: it could not start).

    Raises:
        ConfigError: a worker's port is taken.
        OSError: the node's port is taken.
    """
    reserved = _reserve(settings)
    held: list[socket.socket] = []  # the workers' gossip ports, while they are down
    try:
        seats = _seats(settings, count, held)
    except BaseException:
        for sock in (reserved, *held):
            sock.close()
        raise
    workers = [_Worker(seat) for seat in seats]
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        return _Supervisor(settings, workers, reserved, held, blocked).run()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        for sock in (reserved, *held, *(seat.peers for seat in seats)):
            sock.close()


def _reserve(settings: Settings) -> socket.socket:
    """Bind the node's port for its workers to share (bound, never listening).

    ``SO_REUSEPORT`` would let a second node of the same user share the port
    silently: an exclusive bind first tells a port already taken.

    Raises:
        OSError: the port is taken.
    """
    with listen(settings) as alone:
        port = alone.getsockname()[1]
    return listen(settings, port, shared=True)


def _seats(settings: Settings, count: int, held: list[socket.socket]) -> list[Seat]:
    """Where each worker sits: its member name, its gossip port, its port for the
    peers' calls, and its seeds; the sockets that hold its gossip port while it
    is down go into ``held`` (``hold_port``).

    In a cluster of ``count`` workers per node, worker ``i`` gossips on
    ``core.port + i`` and takes the peers' calls on ``core.port + count + i``:
    the same after a restart of the node, so the others never know one worker
    at two addresses. A node alone has its workers gossip on loopback, on
    ports the OS picks (kept across their restarts).

    Raises:
        ConfigError: a worker's port is taken.
        OSError: a worker's peer socket cannot be bound.
    """
    core, cluster = settings.core, settings.cluster
    if settings.gossip:
        host, secret = cluster.address or core.httpaddress, cluster.shared_secret()
        wanted = [core.port + i if core.port else 0 for i in range(2 * count)]
    else:  # a node alone: its workers gossip with each other only
        host, secret, wanted = "127.0.0.1", secrets.token_hex(32), [0] * (2 * count)
    ports: list[int] = []
    for port in wanted:
        try:
            ports.append(claim_port(host, port))
            if len(ports) <= count:  # a gossip port
                held.append(hold_port(host, ports[-1]))
        except OSError as exc:
            raise ConfigError(
                f"port {host}:{port} for a worker is taken ({exc.strerror}); with "
                f"{count} workers a node uses core.port to core.port + {2 * count - 1}",
                key="core.port",
            ) from None
    gossip = [f"{host}:{port}" for port in ports[:count]]
    seeds = tuple(dict.fromkeys([*(core.seeds() if settings.gossip else []), *gossip]))
    boards = Board.shared(count)
    return [
        Seat(
            worker_name(core.name, i),
            listen(settings, ports[count + i], host=host),
            gossip[i],
            seeds,
            secret,
            settings.gossip,
            boards[i],
        )
        for i in range(count)
    ]


class _Supervisor:
    def __init__(
        self,
        settings: Settings,
        workers: list[_Worker],
        reserved: socket.socket,
        held: list[socket.socket],
        mask: set[int | signal.Signals],
    ) -> None:
        self._settings = settings
        self._workers = workers
        self._reserved = reserved
        self._held = held  # the supervisor's alone: a worker closes its copies
        self._port: int = reserved.getsockname()[1]  # the node's, shared by the workers
        self._mask = mask  # the signal mask workers start with
        self._stopping = False
        self._status = 0
        self._pid = os.getpid()

    def run(self) -> int:
        for worker in self._workers:
            self._start(worker)
        deadline = time.monotonic() + READY_SECONDS
        announced = False
        while not (self._stopping and not self._running()):
            self._signals()
            self._reap()
            self._readiness()
            if not announced and all(w.served for w in self._workers):
                announced = True
                self._announce()
            elif not announced and time.monotonic() > deadline and not self._stopping:
                log.error("the workers did not all serve within %.0f s", READY_SECONDS)
                self._stop(1)
            if not self._stopping:
                self._restart_due()
        return self._status

    # -- the workers -----------------------------------------------------------

    def _start(self, worker: _Worker) -> None:
        ready, told = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the supervisor's stack
            os.close(ready)
            os._exit(self._work(worker.seat, told))
        os.close(told)
        worker.pid, worker.ready, worker.started, worker.due = pid, ready, time.monotonic(), 0.0
        log.debug("worker %s started (pid %d)", worker.seat.name, pid)

    def _work(self, seat: Seat, told: int) -> int:
        """Run one worker until it stops; return its exit status."""
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            _die_with(self._pid)
            label_process(seat.name)
            for sock in (self._reserved, *self._held):
                sock.close()
            for other in self._workers:
                if other.seat is not seat:
                    other.seat.peers.close()
                if other.ready >= 0:
                    os.close(other.ready)

            def ready(_: str) -> None:
                os.write(told, b"1")
                os.close(told)

            sock = listen(self._settings, self._port, shared=True)
            run(serve(self._settings, ready, seat, sock))
        except ConfigError as exc:
            log.error("configuration error: %s", exc)
            return 2
        except (DynamiqError, OSError) as exc:
            log.error("%s", exc)
            return 1
        except BaseException:  # a worker's failure is reported, never raised into a fork
            log.exception("the worker failed")
            return 1
        return 0

    def _running(self) -> list[_Worker]:
        return [w for w in self._workers if w.pid]

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            worker = next((w for w in self._workers if w.pid == pid), None)
            if worker is None:
                continue
            worker.pid = 0
            self._close_ready(worker)
            code = os.waitstatus_to_exitcode(status)
            if self._stopping:
                continue
            if not worker.served:
                log.error("worker %s could not start (exit %d)", worker.seat.name, code)
                self._stop(2 if code == 2 else 1)
                continue
            lived = time.monotonic() - worker.started
            worker.pause = FIRST_PAUSE_SECONDS if lived >= STEADY_SECONDS else worker.pause
            worker.due = time.monotonic() + worker.pause
            log.warning(
                "worker %s exited (%s); starting it again in %.1f s",
                worker.seat.name,
                f"signal {-code}" if code < 0 else f"status {code}",
                worker.pause,
            )
            worker.pause = min(LONGEST_PAUSE_SECONDS, worker.pause * 2)

    def _restart_due(self) -> None:
        now = time.monotonic()
        for worker in self._workers:
            if not worker.pid and worker.due and now >= worker.due:
                self._start(worker)

    def _readiness(self) -> None:
        pipes = {w.ready: w for w in self._workers if w.ready >= 0}
        if not pipes:
            return
        readable, _, _ = select.select(list(pipes), [], [], 0)
        for fd in readable:
            worker = pipes[fd]
            if os.read(fd, 1):
                worker.served = True
                log.debug("worker %s serves", worker.seat.name)
            self._close_ready(worker)

    @staticmethod
    def _close_ready(worker: _Worker) -> None:
        if worker.ready >= 0:
            os.close(worker.ready)
            worker.ready = -1

    # -- signals ---------------------------------------------------------------

    def _signals(self) -> None:
        got = signal.sigtimedwait(SIGNALS, TICK_SECONDS)
        # A wait that SIGSTOP held past its timeout comes back from CPython with a
        # siginfo never filled in (any number as its signal): only those waited for count.
        if got is None or got.si_signo not in SIGNALS or got.si_signo == signal.SIGCHLD:
            return
        if got.si_signo == signal.SIGHUP:
            self._tell(signal.SIGHUP)
        elif self._stopping:
            log.warning("stopping now: killing the workers")
            self._tell(signal.SIGKILL)
        else:
            log.info(
                "stopping on %s from pid %d: the workers finish in-flight requests "
                "(signal again to exit at once)",
                signal.Signals(got.si_signo).name,
                got.si_pid,
            )
            self._stop(0)

    def _stop(self, status: int) -> None:
        self._stopping, self._status = True, status
        self._tell(signal.SIGTERM)

    def _tell(self, sig: signal.Signals) -> None:
        for worker in self._running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, sig)

    def _announce(self) -> None:
        settings = self._settings
        url = url_of(self._reserved, settings.tls.enabled)
        gossip = self._workers[0].seat.gossip if settings.gossip else ""
        announce(settings, url, gossip, len(self._workers))


def _die_with(supervisor: int) -> None:
    """Have the kernel kill this process when the supervisor dies (kill -9 included)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != supervisor:  # it died before the line above
        os._exit(1)
