"""The engine's periodic duties: expire unanswered questions and repair runs whose worker died.

Whatever process hosts an engine runs them (``serve``, ``demo``, ``chat``). Every instance ticks;
a once-per-tick lock in the store makes each tick's sweep run on one instance only. Front ends
learn what a sweep did from the engine's events (a closed question, a stalled run), not from here.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from bot.agent.engine import Engine
from bot.agent.engine_errors import EngineError
from bot.agent.periodic import Periodic, claimed
from state.store_errors import StoreError

log = logging.getLogger(__name__)


class Sweeps:
    def __init__(self, engine: Engine, *, interval_s: float = 15.0, stale_after_s: float = 45.0) -> None:
        self.engine = engine
        self.interval_s = interval_s
        self.stale_after_s = stale_after_s
        self._loop = Periodic("engine-sweeps", lambda: self.tick(), lambda: self.interval_s, logger=log,
                              failed="engine sweep failed")
        self.on_lost: Callable[[str], Awaitable[bool]] | None = None
        """Where a front end can carry on a run whose worker died while it only read (no change in flight):
        True when it took the run on (resumed elsewhere, bounded), False to park it for a person's Resume."""

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def tick(self) -> bool:
        """One sweep, if this instance is the first to claim this interval's slot; every instance's own counts
        that waited long enough go to the stats (an idle one has no next write for them to ride with)."""
        with contextlib.suppress(StoreError):
            await self.engine.deps.store.flush_counts()
        return await claimed(self.engine.deps.store.locks, "sweep", self.interval_s, self.sweep, logger=log,
                             skipped="sweep skipped")

    async def sweep(self, now: float | None = None) -> None:
        now = now or time.time()
        store = self.engine.deps.store
        for run_id in await store.runs_due("paused", now):
            try:
                await self.engine.expire_due(run_id, now)
            except EngineError as exc:
                log.warning("expiring run %s: %s", run_id, exc)
        for run_id in await store.runs_due("active", now - self.stale_after_s):
            if await self._held(run_id):
                continue  # quiet for long (one slow model call, a long read), but its worker still holds the thread
            if self.on_lost is not None and await self._only_read(run_id) and await self.on_lost(run_id):
                continue  # carried on by itself (its lease decides who, if its worker lives after all)
            try:
                outcome = await self.engine.repair(run_id)
            except EngineError as exc:
                log.warning("repairing run %s: %s", run_id, exc)
                continue
            if outcome is not None and outcome.status == "stalled":
                log.warning("run %s lost its worker; repaired and waiting for Resume", run_id)

    async def _held(self, run_id: str) -> bool:
        """A live worker renews its thread's lease; a dead one's lapses within the lease's length, shorter than
        ``stale_after_s``: a run quiet for long whose thread is held is at work, not lost (counting it as lost
        spent its automatic carry-ons, so that a real death then left it waiting for a Resume)."""
        store = self.engine.deps.store
        record = await store.load_run(run_id)
        return record is not None and await store.locks.leased(record.thread_id)

    async def _only_read(self, run_id: str) -> bool:
        """No change was in flight when the run's worker went quiet: every journaled call has finished."""
        states = await self.engine.deps.store.journal.states(run_id)
        return all(state != "started" for state in states.values())
