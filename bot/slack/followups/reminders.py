"""Slack's own periodic duty: remind the requester shortly before a question expires.

Expiry and recovery themselves are engine sweeps (:mod:`bot.agent.sweeps`); this only speaks.
Every instance runs it (:class:`~bot.agent.periodic.Periodic`); a once-per-tick lock makes each tick fire on one
instance, and a first-time marker per question makes each reminder go out once.
"""

from __future__ import annotations

import logging
import time

from bot.agent.engine import Engine
from bot.agent.periodic import Periodic, claimed
from bot.config import SlackConfig
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.thread_meta import THREAD
from bot.slack.outbound.words import say
from state.store import MetaStore

log = logging.getLogger(__name__)


class Reminders:
    def __init__(self, *, engine: Engine, meta: MetaStore, outbox: SlackOutbox, config: SlackConfig,
                 interval_s: float) -> None:
        self.engine = engine
        self.meta = meta
        self.outbox = outbox
        self.config = config
        self.interval_s = interval_s
        self._loop = Periodic("opspilot-reminders", lambda: self.tick(), lambda: self.interval_s, logger=log,
                              failed="reminders round failed")

    def start(self) -> None:
        if self.config.reminder_before_s:
            self._loop.start()

    def stop(self) -> None:
        self._loop.cancel()  # the service stops it without awaiting, as it did the scheduler

    async def tick(self) -> bool:
        """One round, claimed so that only one instance performs it per interval."""
        return await claimed(self.engine.deps.store.locks, "remind", self.interval_s, self.sweep, logger=log,
                             skipped="reminders skipped")

    async def sweep(self, now: float | None = None) -> None:
        now = now or time.time()
        before = self.config.reminder_before_s
        for ticket in await self.engine.questions(expiring_before=now + before):
            pending = ticket.pending
            if not pending.expires_at - before <= now < pending.expires_at:
                continue
            where = await self.meta.get(THREAD, ticket.thread_id)
            if where and await self.meta.first_time(f"remind:{pending.token}"):
                minutes = max(int((pending.expires_at - now) // 60), 1)
                who = f"<@{ticket.requester}> " if ticket.requester else ""
                text = say(str(where.get("lang") or "en"), "reminder", who=who, tool=kit.bare(pending.call.name),
                           minutes=minutes)  # in the thread's language
                await self.outbox.say(where["channel"], where["thread_ts"], text, key=f"remind:{pending.token}")
