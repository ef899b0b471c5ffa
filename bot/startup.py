"""A serving process's start-up, without the cyclic garbage collector.

Importing the engine, Slack and Redis leaves ~90,000 objects the collector tracks, nearly all living as long as the
process; the collector, run every 700 allocations, would scan them again and again and find little to free (~8 %
of a worker's imports, alternating runs with and without). So ``serve`` and ``worker`` follow CPython's recipe
for processes that fork (the :mod:`gc` docs): disable it early, freeze what exists right before ``fork()``, and
turn it back on once ready, after freezing again. Frozen objects are never scanned by a later collection either,
and the pages a forked worker shares with its front stay shared (no collection writes to them).

The few thousand unreachable objects start-up leaves (~2,500, once per process) are frozen with the rest rather than
collected: a full collection there would cost ~70 ms before the first read of the queue. Nothing here is needed
for correctness: only those two commands call :func:`begin`, and ``main`` turns the collector back on however
they end (a config error before serving, a stop)."""

from __future__ import annotations

import gc

_paused = False
"""Whether :func:`begin` paused the collector: :func:`ready` turns back on only what it turned off."""


def begin() -> None:
    """At the start of ``serve`` or ``worker``, before their imports: no collection until :func:`ready`."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def before_fork() -> None:
    """Right before forking a worker: what the front made so far is shared with it and stays untouched."""
    gc.freeze()


def ready() -> None:
    """The process serves: what start-up made lives as long as it does (never scanned again); collect from now."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
