"""``opspilot serve`` and ``opspilot worker``: a front that acknowledges and enqueues, and worker processes
that run the engine, render and deliver.

``serve --workers N`` starts the front plus N worker processes on this machine and restarts any that
dies; ``worker`` runs workers alone, so fronts and workers scale separately across machines on one
Redis. ``--workers 0`` is one process that does everything. Each process serves ``/healthz``, ``/readyz``
and ``/metrics`` (workers on ``PORT + i``). A worker a front started exits when the front is gone
(:mod:`bot.slack.inbound.tether`), so a front started again finds its ports free.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from bot import exits, startup
from bot.assembly import DEMO_DATA_FIX, demo_actions_problem, demo_data_problem, demo_note
from bot.config import ConfigError, Settings
from bot.cpus import last_port
from bot.slack.inbound import tether
from bot.slack.outbound.api_errors import TokenRefused
from bot.slack.outbound.words import say
from bot.slack.service import Role, SlackService, build_service

log = logging.getLogger(__name__)


class PortTaken(Exception):
    """A port this process must listen on is held by another."""

    @classmethod
    def at(cls, port: int, exc: OSError) -> PortTaken:
        """In one line, for whichever command failed to listen (serve, worker, demo)."""
        why = os.strerror(exc.errno) if exc.errno else exc.strerror  # asyncio's strerror repeats the address
        return cls(f"port {port} is in use ({why}): stop what listens there (an earlier OpsPilot?) or set PORT "
                   "(or --port) to another")


async def claim(ports: list[int], wait_s: float = 3.0) -> list[socket.socket]:
    """:func:`claim_now` from a running event loop: the waiting happens in a thread, the loop stays responsive."""
    return await asyncio.to_thread(claim_now, ports, wait_s)


def claim_now(ports: list[int], wait_s: float = 3.0) -> list[socket.socket]:
    """Sockets bound to ``ports``, before anything else starts. A port still held is waited for a moment (the
    workers of a front killed just now take up to 2 s to go); then :class:`PortTaken`, in one line (a port out
    of range is a ConfigError: the configuration, not the moment)."""
    deadline, bound = time.monotonic() + wait_s, list[socket.socket]()
    if too_high := [p for p in ports if not 0 < p < 65536]:  # the workers' ports follow the front's
        raise ConfigError(f"port {too_high[0]} is out of range: with --workers N, the port and the N after it must "
                        "all be at most 65535; set PORT (or --port) lower")
    try:
        for port in ports:
            while True:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp: TIME_WAIT does not count
                try:
                    sock.bind(("0.0.0.0", port))
                    bound.append(sock)
                    break
                except OSError as exc:
                    sock.close()
                    if time.monotonic() >= deadline:
                        raise PortTaken.at(port, exc) from exc
                    time.sleep(0.1)
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    return bound


async def _listen(service: SlackService, sock: socket.socket) -> web.AppRunner:
    runner = web.AppRunner(service.web_app)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    return runner


async def _run(settings: Settings, role: Role, sock: socket.socket | None, banner: str,
               stopping: asyncio.Event | None = None, said: Callable[[], None] | None = None) -> int:
    socket_mode = role != "worker" and bool(settings.slack.app_token)
    try:
        service = await build_service(settings, socket_mode=socket_mode, role=role)
    except BaseException:
        if sock is not None:
            sock.close()
        raise
    service.start()
    runner = await _listen(service, sock) if sock is not None else None
    startup.ready()
    stopping = stopping or asyncio.Event()
    # Before the banner: whoever reads it may stop us at once (a signal ignored until now would be lost).
    for sig in (signal.SIGTERM, signal.SIGINT):  # stop gracefully: finish, deliver, stop the workers
        asyncio.get_running_loop().add_signal_handler(sig, stopping.set)
    if role == "worker":
        await _after_front(stopping)
    try:
        if role != "worker" and service.identity is not None:  # a bot token Slack refuses: said, and not served
            await service.identity.confirm()
        if service.link is not None:  # …and an app token
            await service.link.confirm()
        print(banner.format(model=service.core.model.label), flush=True)
        if service.core.model.scripted:  # said where an operator looks first, not only in App Home
            print(f"  {say('en', 'no_model_key')}", flush=True)
        if said is not None:
            said()
        if service.link is not None and await service.link.connect(stopping):
            print("Connected to Slack (Socket Mode).", flush=True)
        await stopping.wait()
    except TokenRefused as exc:  # a credential Slack refuses: the configuration, not the moment
        print(f"opspilot: {exc}", file=sys.stderr, flush=True)
        return exits.CONFIG
    finally:
        if service.link is not None:
            await service.link.close()
        await service.stop()
        if runner is not None:
            await runner.cleanup()
        await service.core.close_connections()
    return 0


_SAID_ENV = "OPSPILOT_FRONT_SAID_FD"
"""In a worker forked from its front: a pipe the front writes to (or closes) once it has printed its banner."""


async def _after_front(stopping: asyncio.Event) -> None:
    """A forked worker is ready before its front: it prints its banner only after the front's, so whoever reads
    the output reads the front's first (as when its workers were new processes, slower to start). It works
    meanwhile; only the lines wait."""
    spec = os.environ.pop(_SAID_ENV, "")
    if not spec.isdigit():
        return
    fd, loop = int(spec), asyncio.get_running_loop()
    heard: asyncio.Future[bool] = loop.create_future()

    def readable() -> None:  # at end-of-file, until the reader is removed
        if not heard.done():
            heard.set_result(True)

    loop.add_reader(fd, readable)

    async def stopped() -> bool:
        return await stopping.wait()

    leaving = asyncio.ensure_future(stopped())
    try:
        await asyncio.wait({heard, leaving}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        leaving.cancel()
        loop.remove_reader(fd)
        os.close(fd)


def _tell(fds: list[int]) -> None:
    """The front has printed its banner (or is gone): each forked worker may print its own."""
    while fds:
        os.close(fds.pop())  # end-of-file is the word


class Forked:
    """A worker forked from its front (:func:`prepare`), waited for and stopped as an asyncio subprocess is."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._reaped: asyncio.Future[None] | None = None

    def _reap(self) -> None:  # in a thread: blocks until the worker exits
        _, status = os.waitpid(self.pid, 0)
        self.returncode = os.waitstatus_to_exitcode(status)  # at once: no signal may reach the pid once reused

    async def wait(self) -> int:
        if self._reaped is None:
            self._reaped = asyncio.ensure_future(asyncio.to_thread(self._reap))
        await asyncio.shield(self._reaped)  # a cancelled wait leaves the reaping running, for the next one
        return self.returncode if self.returncode is not None else -1

    def _signal(self, sig: signal.Signals) -> None:
        if self.returncode is not None:
            raise ProcessLookupError(self.pid)
        os.kill(self.pid, sig)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)


YOUNG_S = 10.0
"""A worker that dies sooner than this after its start is crash-looping (its configuration, a bug at start): the wait
before the next start doubles, up to 30 s. One that worked longer (killed by the OOM killer or a node's trouble,
every few seconds during an incident) starts again after 1 s: doubling then left the soak's front with one worker,
or none, for half a minute at a time."""
UNAVAILABLE_WAIT_S = 2.0
"""A worker that exits because Redis did not answer at its start (``exits.UNAVAILABLE``: an outage under way) is
started again after this, however often: each start costs ~0.6 s of a core, and a longer wait would leave the
front short of workers for up to 30 s after Redis is back (the issue-scale soak saw it)."""


def restart_after(failures: int, lived_s: float, code: int | None = None) -> tuple[int, float]:
    """A worker died after ``lived_s`` (exit ``code``), its ``failures``-th young death before: how many now, and
    how long to wait before starting it again."""
    if code == exits.UNAVAILABLE:  # Redis away as it started: not a crash loop of ours; tried again every few
        return failures, UNAVAILABLE_WAIT_S  # seconds, so that the worker is back within them of Redis, not 30 s
    failures = failures + 1 if lived_s < YOUNG_S else 1
    return failures, min(30.0, 2.0 ** (failures - 1))


async def _supervise(index: int, argv: list[str], stopping: asyncio.Event, sock: socket.socket,
                     first: tuple[Forked, int] | None = None) -> None:
    """Keep one worker process alive: a worker that dies is started again (its work is claimed meanwhile),
    after a wait that grows while it keeps dying young. Once the front is stopping, a worker that exits
    (Ctrl-C reaches the whole process group) stays stopped. ``first``: the worker forked at the front's start
    (the ones started again are new processes: by then this one has an event loop and threads to fork with)."""
    failures = 0
    while not stopping.is_set():
        started = time.monotonic()
        proc: Forked | asyncio.subprocess.Process
        proc, pipe = first or await tether.spawn(sys.executable, "-m", "bot.cli", *argv, listen=sock)
        first = None
        try:
            code = await proc.wait()
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 45)  # a worker finishes its work and deliveries first
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            raise
        finally:
            os.close(pipe)  # only once it has exited: to the worker, a closed pipe means the front is gone
        if not stopping.is_set():
            failures, delay = restart_after(failures, time.monotonic() - started, code)
            log.error("worker %d exited with code %s; starting it again in %gs", index, code, delay)
            await asyncio.sleep(delay)


def _demo_data_refused(settings: Settings, who: str = "opspilot") -> bool:
    """Production never answers from the demo data by accident (a missing opspilot.yml): said, and not started."""
    problem, acting = demo_data_problem(settings), demo_actions_problem(settings)
    if problem:
        print(f"{who}: not starting: {problem}: {DEMO_DATA_FIX}", file=sys.stderr)
    if acting:
        print(f"{who}: not starting: {acting[0]}: {acting[1]}", file=sys.stderr)
    return bool(problem or acting)


@dataclass
class Front:
    """A front about to serve (:func:`prepare`): every port bound, and its workers forked from it."""

    own: socket.socket
    theirs: list[socket.socket]
    argvs: list[list[str]]
    """Each worker's command line (``worker --port …``): how one that dies is started again."""
    forked: list[tuple[Forked, int] | None]
    """Each first worker and the write end of its tether (None: not forked, it is spawned)."""
    said: list[int]
    """The write ends of the forked workers' :data:`_SAID_ENV` pipes, closed once the front's banner is out."""


@dataclass
class ForkedWorker:
    """In a process just forked from a front: it is a worker, and runs this command line (``worker …``)."""

    argv: list[str]


def prepare(settings: Settings, *, workers: int | None = None, config: str | None = None
            ) -> Front | ForkedWorker | int:
    """Before the front's event loop exists: bind every port the front and its workers need, then fork the
    workers from this process, which has imported what they run (a worker started as a new process spends most
    of its start importing it again). In the front, a :class:`Front` for :func:`serve`; in each worker, a
    :class:`ForkedWorker`; an exit code when it cannot start."""
    if _demo_data_refused(settings):
        return exits.CONFIG
    port = settings.slack.port
    count = last_port(port, workers) - port
    try:  # every port this front and its workers need, now: a port in use is one line, not workers crash-looping
        own, *theirs = claim_now([port, *range(port + 1, port + 1 + count)])
    except PortTaken as exc:
        print(f"opspilot: {exc}", file=sys.stderr)
        return exits.UNAVAILABLE
    # The workers' sockets stay bound here and are handed to each worker (and to one started again): a port
    # released for a moment could be taken by another process in between.
    base = [*(["--config", config] if config else []), "worker"]
    front = Front(own, theirs, [[*base, "--port", str(port + 1 + i)] for i in range(count)], [], [])
    for argv, sock in zip(front.argvs, theirs, strict=True):
        forked = _fork(argv, sock, front)
        if isinstance(forked, ForkedWorker):
            return forked
        front.forked.append(forked)
    return front


def _fork(argv: list[str], sock: socket.socket, front: Front) -> tuple[Forked, int] | ForkedWorker | None:
    """One worker forked, tied to this front as :func:`tether.spawn` ties one it starts; None where forking is
    not safe (threads already running: a lock one holds would stay held in the child forever; not Linux)."""
    if sys.platform != "linux" or threading.active_count() > 1:
        return None
    read_end, write_end = os.pipe()
    hear, told = os.pipe()
    sys.stdout.flush()  # what is buffered would be written by both processes
    sys.stderr.flush()
    startup.before_fork()
    try:
        pid = os.fork()
    except OSError as exc:
        for fd in (read_end, write_end, hear, told):
            os.close(fd)
        log.warning("could not fork a worker (%s): starting it as a new process", exc)
        return None
    if pid:
        os.close(read_end)
        os.close(hear)
        front.said.append(told)
        return Forked(pid), write_end
    # The worker keeps nothing of the front's but its own socket and its end of the tether: a port or a pipe
    # held here would outlive the front (a front started again would find its port taken).
    for fd in (write_end, told, *front.said):
        os.close(fd)
    for other in front.forked:
        if other is not None:
            os.close(other[1])
    for held in (front.own, *front.theirs):
        if held is not sock:
            held.close()
    os.environ[tether.ENV] = f"{os.getppid()}:{read_end}"
    os.environ[_SAID_ENV] = str(hear)
    os.environ[tether.LISTEN_ENV] = str(sock.detach())  # tether.inherited_socket() owns it from now on
    return ForkedWorker(argv)


async def serve(settings: Settings, front: Front) -> int:
    """The front, its workers already started by :func:`prepare`."""
    count, port = len(front.theirs), settings.slack.port
    mode = "Socket Mode" if settings.slack.app_token else f"HTTP mode, POST http://0.0.0.0:{port}/slack/events"
    if count == 0:  # nothing forked
        return await _run(settings, "all", front.own, f"OpsPilot is serving Slack ({mode}), one process; /healthz, "
                                                      f"/readyz and /metrics on port {port}; model: {{model}}"
                                                      f"{demo_note(settings)}")
    stopping = asyncio.Event()
    keepers = [asyncio.create_task(_supervise(i, argv, stopping, sock, forked))
               for i, (argv, sock, forked) in enumerate(zip(front.argvs, front.theirs, front.forked, strict=True))]
    try:
        code = await _run(settings, "front", front.own, f"OpsPilot is serving Slack ({mode}) with {count} worker "
                                                        f"process(es) on ports {port + 1}–{port + count}; /healthz, "
                                                        f"/readyz and /metrics on port {port}; model: {{model}}"
                                                        f"{demo_note(settings)}", stopping,
                          lambda: _tell(front.said))
    finally:
        _tell(front.said)
        for keeper in keepers:
            keeper.cancel()
        await asyncio.gather(*keepers, return_exceptions=True)
        for sock in front.theirs:
            sock.close()
    return code


async def work(settings: Settings, *, port: int | None = None) -> int:
    if _demo_data_refused(settings, "opspilot worker"):
        return exits.CONFIG
    stopping = asyncio.Event()
    tether.hold(stopping.set)  # started by a front: leave with it
    try:
        sock = tether.inherited_socket() or ((await claim([port]))[0] if port else None)
    except PortTaken as exc:
        print(f"opspilot worker: {exc}", file=sys.stderr)
        return exits.UNAVAILABLE
    where = f"; /healthz, /readyz and /metrics on port {port}" if port else ""
    return await _run(settings, "worker", sock, f"OpsPilot worker {os.getpid()} is reading the work queue{where}; "
                                                f"model: {{model}}{demo_note(settings)}", stopping)
