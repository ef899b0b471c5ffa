"""Periodic sweeps (APScheduler): expire unanswered questions, remind before expiry, and find runs
whose worker died. Every instance schedules them; a Redis claim per tick makes each fire once."""

from __future__ import annotations

import logging
import time

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot.agent.engine import Engine
from bot.agent.errors import EngineError
from bot.config import SlackConfig
from bot.slack.surface import THREAD_META, SlackSurface
from state import StoreError
from state.store import Store

log = logging.getLogger(__name__)


class Sweeper:
    def __init__(self, *, engine: Engine, store: Store, surface: SlackSurface, config: SlackConfig) -> None:
        self.engine = engine
        self.store = store
        self.surface = surface
        self.config = config
        self._scheduler: AsyncIOScheduler | None = None

    def start(self) -> None:
        self._scheduler = AsyncIOScheduler(timezone="UTC")
        self._scheduler.add_job(self.tick, "interval", seconds=self.config.sweep_interval_s, id="opspilot-sweep",
                                max_instances=1, coalesce=True)
        self._scheduler.start()

    def stop(self) -> None:
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)

    async def tick(self) -> bool:
        """One sweep, claimed through Redis so only one instance performs it per interval."""
        slot = int(time.time() // self.config.sweep_interval_s)
        try:
            if not await self.store.dedupe(f"sweep:{slot}", ttl_s=int(self.config.sweep_interval_s) + 5):
                return False
            await self.sweep()
        except StoreError as exc:
            log.warning("sweep skipped: %s", exc)
        return True

    async def sweep(self, now: float | None = None) -> None:
        now = now or time.time()
        for run_id in await self.store.runs_due("paused", now):
            try:
                await self.engine.expire_due(run_id, now)
            except EngineError as exc:
                log.warning("expiring run %s: %s", run_id, exc)
        if self.config.reminder_before_s:
            await self._remind(now)
        for run_id in await self.store.runs_due("active", now - self.config.stale_after_s):
            try:
                outcome = await self.engine.repair(run_id)
            except EngineError as exc:
                log.warning("repairing run %s: %s", run_id, exc)
                continue
            if outcome is not None and outcome.status == "stalled":
                log.warning("run %s lost its worker; repaired and waiting for Resume", run_id)
                await self.surface.mark_stalled(run_id)

    async def _remind(self, now: float) -> None:
        for run_id in await self.store.runs_due("paused", now + self.config.reminder_before_s):
            record = await self.store.load_run(run_id)
            if record is None:
                continue
            where = await self.store.get_meta(THREAD_META, record.thread_id)
            for pending in record.pending:
                due = pending.expires_at - self.config.reminder_before_s
                if where and due <= now < pending.expires_at and await self.store.dedupe(f"remind:{pending.token}"):
                    minutes = max(int((pending.expires_at - now) // 60), 1)
                    await self.surface.remind(where["channel"], where["thread_ts"], record.user_id,
                                              pending.call.name, minutes)
