"""A periodic duty, written once: the loop that sweeps, reminders, catch-up and the timer firer share.

Every instance runs the loop; where only one instance may do a round per interval, the round goes through
:func:`claimed`, which takes this interval's slot with a once-lock in the store. A round that fails is logged
and the loop goes on: one bad round must not end the duty.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from state.store import Locks
from state.store_errors import StoreError, level_of

Round = Callable[[], Awaitable[object]]


async def cancelled(task: asyncio.Task[object] | asyncio.Future[object]) -> None:
    """Cancel ``task`` and wait until it has ended, cancelling again while it has not: on Python 3.11 a cancel
    that lands as an inner wait ends (``wait_for``, a Redis reply) can be swallowed, and the task goes on waiting
    (a stop that awaited it once waited for good)."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def claimed(locks: Locks, name: str, interval_s: float, round_: Round, *, logger: logging.Logger,
                  skipped: str) -> bool:
    """Run ``round_`` if this instance is the first to claim this interval's slot of ``name``; False when another
    had it. A store failure is logged (``skipped``: "<what> skipped") at its level and still counts as claimed."""
    slot = int(time.time() // interval_s)
    try:
        if not await locks.once(f"{name}:{slot}", int(interval_s) + 5):  # outlives the slot: no second claim
            return False
        await round_()
    except StoreError as exc:
        logger.log(level_of(exc), "%s: %s", skipped, exc)
    return True


class Periodic:
    """``round_`` every ``interval_s`` seconds in a task of its own, until stopped.

    ``interval_s`` is read each time (its owner's attribute may change); ``wait_first`` sleeps before the first
    round; ``setup``, when given, runs first and is retried every interval while the store fails.
    """

    def __init__(self, name: str, round_: Round, interval_s: Callable[[], float], *, logger: logging.Logger,
                 failed: str, wait_first: bool = True, setup: Callable[[], Awaitable[None]] | None = None,
                 setup_failed: str = "") -> None:
        self.name = name
        self.round = round_
        self.interval_s = interval_s
        self.logger = logger
        self.failed = failed
        self.wait_first = wait_first
        self.setup = setup
        self.setup_failed = setup_failed
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._forever(), name=self.name)

    def cancel(self) -> None:
        """Stop without waiting (for a caller that cannot await): the task ends at its next await."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def stop(self) -> None:
        if self._task is not None:
            await cancelled(self._task)
            self._task = None

    async def _forever(self) -> None:
        while self.setup is not None:
            try:
                await self.setup()
                break
            except StoreError as exc:
                self.logger.log(level_of(exc), "%s: %s", self.setup_failed, exc)
                await asyncio.sleep(self.interval_s())
        if self.wait_first:
            await asyncio.sleep(self.interval_s())
        while True:
            try:
                await self.round()
            except Exception:  # one bad round must not end the duty
                self.logger.exception(self.failed)
            await asyncio.sleep(self.interval_s())
