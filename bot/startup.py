"""A serving process's start-up, without the cyclic garbage collector.

Importing the engine, Slack and Redis allocates a few hundred thousand objects that live as long as the process;
the collector, run every 700 allocations, would scan them again and again and find nothing to free (~8 % of a
worker's start, measured with bench/startup.py). So ``serve`` and ``worker`` follow CPython's recipe for processes
that fork (the :mod:`gc` docs): disable it early, freeze what exists right before ``fork()``, and turn it back on
once ready, after freezing again. Frozen objects are never scanned by a later collection either, and the pages a
forked worker shares with its front stay shared (no collection writes to them).

Nothing here is needed for correctness: a process that never calls :func:`ready` (an import in a test, a command
that is not a server) keeps the collector on, because :func:`begin` is only called by those two commands."""

from __future__ import annotations

import gc


def begin() -> None:
    """At the start of ``serve`` or ``worker``, before their imports: no collection until :func:`ready`."""
    gc.disable()


def before_fork() -> None:
    """Right before forking a worker: what the front made so far is shared with it and stays untouched."""
    gc.freeze()


def ready() -> None:
    """The process serves: what start-up made lives as long as it does (never scanned again); collect from now."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
