"""A worker that a front started lives no longer than its front.

The front hands each worker the read end of a pipe and its own pid (``OPSPILOT_FRONT=pid:fd``) and keeps the
write end until the worker has exited. The kernel closes that end when the front dies, however it dies
(``kill -9`` included), so the worker reads end-of-file: this works off Linux too. On Linux the worker also
asks for a parent-death signal (``prctl(PR_SET_PDEATHSIG)``). The worker then stops taking work and exits
within :data:`GRACE_S`; an item it has not finished by then is never acknowledged, so it stays pending in
the queue and another worker takes it over (the same path as a worker that crashed).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

ENV = "OPSPILOT_FRONT"
LISTEN_ENV = "OPSPILOT_LISTEN_FD"
GRACE_S = 1.5
"""From noticing the front is gone to exiting: stop taking work, let what is nearly done finish, then go."""
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


async def spawn(*argv: str, listen: socket.socket | None = None) -> tuple[asyncio.subprocess.Process, int]:
    """Start ``argv`` tied to this process. Returns it and the pipe's write end, to be closed only once the
    process has exited (closing it earlier tells the worker its front is gone). ``listen``: a socket the front
    bound for it, handed over (:func:`inherited_socket`) so that no other process can take its port between
    the front's start and the worker's, nor while a worker is being started again."""
    read_end, write_end = os.pipe()  # both close-on-exec: only this child gets the read end (pass_fds)
    env = {**os.environ, ENV: f"{os.getpid()}:{read_end}"}
    fds = [read_end]
    if listen is not None:
        env[LISTEN_ENV] = str(listen.fileno())
        fds.append(listen.fileno())
    try:
        proc = await asyncio.create_subprocess_exec(*argv, pass_fds=fds, env=env)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return proc, write_end


def inherited_socket() -> socket.socket | None:
    """The socket a front bound for this worker (see :func:`spawn`), or None when started alone."""
    spec = os.environ.pop(LISTEN_ENV, "")  # not for the processes this one starts
    return socket.socket(fileno=int(spec)) if spec.isdigit() else None


def hold(on_gone: Callable[[], None]) -> None:
    """In a process a front started: ``on_gone`` is called on the running event loop once the front is gone,
    and the process ends :data:`GRACE_S` later whatever it is doing. Nothing happens in a worker started alone."""
    spec = os.environ.pop(ENV, "")  # not for the processes this one starts (MCP servers)
    if not spec:
        return
    front, fd = (int(part) for part in spec.split(":"))
    os.set_inheritable(fd, False)
    loop = asyncio.get_running_loop()
    once = threading.Lock()

    def gone(how: str) -> None:  # from any thread
        if not once.acquire(blocking=False):
            return
        log.warning("the front (pid %d) is gone (%s): exiting within %gs; unfinished work stays queued for "
                    "another worker", front, how, GRACE_S)
        # A thread, not the loop, keeps the deadline: a stuck loop cannot keep an orphan alive.
        deadline = threading.Timer(GRACE_S, os._exit, (1,))
        deadline.daemon = True
        deadline.start()
        loop.call_soon_threadsafe(on_gone)

    def orphaned() -> bool:  # re-parented (to init or a subreaper): the front that started us has died
        return os.getppid() != front

    def watch() -> None:
        try:
            while os.read(fd, 64):  # the front never writes; this returns b"" once its end is closed
                pass
        except OSError:
            pass
        gone("its pipe closed")

    threading.Thread(target=watch, name="front-watch", daemon=True).start()
    if sys.platform == "linux":
        loop.add_signal_handler(signal.SIGUSR1, lambda: gone("parent-death signal") if orphaned() else None)
        _parent_death_signal(signal.SIGUSR1)
    if orphaned():  # it died before we could ask to be told
        gone("before this worker started")


def _parent_death_signal(sig: int) -> None:
    """Linux sends ``sig`` when the *thread* that forked us ends, not the process: a front forks from its
    event loop's (main) thread, which ends only with it, and the handler checks the parent pid anyway."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(sig), ctypes.c_ulong(0), ctypes.c_ulong(0),
                  ctypes.c_ulong(0)) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG) failed: %s; the pipe still tells", os.strerror(ctypes.get_errno()))
