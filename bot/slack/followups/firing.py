"""Firing follow-ups and scheduled checks when they are due, once, however many instances run.

Every instance that runs the engine ticks; each tick claims what is due (:meth:`state.timer_store.TimerStore.claim`:
a lease no other instance sees through), hands each occurrence on as work — a follow-up as a turn in its thread,
a scheduled check as a :class:`~bot.slack.inbound.work.Check` — and then completes it. An instance killed between the
claim and the hand-on leaves the occurrence to be claimed again when the lease ends; one killed after handing it
on hands it on again, under the same request id (timer + due time), which the engine runs once.

Missed while nothing ran: within ``misfire_grace_s`` it runs late (the turn says how late); beyond, it is skipped
with a line saying so, and a schedule goes on from its next time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot import when
from bot.agent.engine import Engine
from bot.agent.periodic import Periodic
from bot.assembly import Assembly
from bot.config import Settings
from bot.slack.followups.buttons import LATE_NOTE_S, SlackFollowups, label, time_of
from bot.slack.followups.checks import Checks
from bot.slack.followups.schedules import Schedules
from bot.slack.inbound.access import AccessPolicy
from bot.slack.inbound.run_gate import Admitted, Door, RunGate
from bot.slack.inbound.work import Executor
from bot.slack.inbound.work_items import Check, Converse, WorkItem
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.thread_meta import thread_key
from bot.slack.outbound.words import say
from core.redact import redact
from state import StoreError
from state.store import Reports
from state.store_errors import level_of
from state.timer_store import Claimed, Timer, TimerStore

log = logging.getLogger(__name__)

LEASE_S = 60.0
"""How long a claimed occurrence stays hidden from other instances: far longer than handing it on takes."""
HANDED = "timer-handed"
"""Meta kind: an occurrence's request id → when it was handed on. Read when the occurrence is claimed again (its
instance died before completing it): handed on already, it is neither judged late nor busy again — it runs."""


class Firer:
    def __init__(self, *, timers: TimerStore, slack: SlackFollowups, engine: Engine, outbox: SlackOutbox,
                 reports: Reports, dispatch: Callable[[WorkItem], Awaitable[None]], misfire_grace_s: float,
                 clock: Callable[[], float] = time.time, interval_s: float = 5.0, lease_s: float = LEASE_S,
                 on_start: Callable[[], Awaitable[None]] | None = None) -> None:
        self.timers, self.slack, self.engine, self.outbox, self.reports = timers, slack, engine, outbox, reports
        self.dispatch = dispatch
        self.grace_s = misfire_grace_s
        self.clock = clock
        self.interval_s = interval_s
        self.lease_s = lease_s
        self.on_start = on_start
        self._loop = Periodic("opspilot-timers", lambda: self.tick(), lambda: self.interval_s, logger=log,
                              failed="firing due timers failed", wait_first=False,
                              setup=on_start,  # the config's schedules, once Redis answers
                              setup_failed="scheduled checks from the config not loaded yet")
        self.gate: RunGate | None = None
        """Limits on how often runs start: a follow-up or a check counts in its owner's and channel's windows."""

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def tick(self) -> int:
        """Claim what is due now and hand each occurrence on; returns how many were claimed."""
        now = self.clock()
        try:
            claimed = await self.timers.claim(now, self.lease_s)
        except StoreError as exc:
            log.log(level_of(exc), "due timers not read: %s", exc)
            return 0
        for one in claimed:
            try:
                await self.fire(one, now)
            except StoreError as exc:  # left claimed: fired again once its lease ends
                log.log(level_of(exc), "timer %s not fired yet: %s", one.timer.id, exc)
            except Exception:
                log.exception("timer %s failed; it is tried again once its lease ends", one.timer.id)
        return len(claimed)

    async def fire(self, claimed: Claimed, now: float) -> None:
        timer = claimed.timer
        late = now - timer.due
        if timer.kind == "followup":
            await self._followup(claimed, late, now)
        else:
            await self._schedule(claimed, late, now)

    async def _followup(self, claimed: Claimed, late: float, now: float) -> None:
        timer = claimed.timer
        thread_id = thread_key(timer.channel, str(timer.thread_ts))
        if not await self.engine.handled(thread_id, timer.request_id):
            # Handed on before by an instance that died before completing it: the turn may still be queued, so it
            # is neither late nor busy now (it says itself whether it ran) — handed on again, which runs it once.
            if not await self._handed(timer):
                skip: str | None = "fu_skipped_late"
                if late <= self.grace_s:
                    may = await self._owner_may(timer)
                    if may is None:  # Slack could not say who may: left claimed, tried again once its lease ends
                        return
                    skip = None if may else "fu_skipped_access"
                if skip is None and await self.engine.under_way(thread_id):  # a turn there, or a question waiting
                    skip = "fu_skipped_busy"
                if skip is None and not await self._admitted(timer, "followup"):
                    skip = "fu_skipped_limit"
                if skip is not None:
                    if await self.timers.complete(claimed):
                        await self.slack.skipped(timer, skip, minutes=int(late // 60), grace=int(self.grace_s // 60),
                                                 who=kit.who(timer.owner))
                        await self.reports.tally(timer.group, "followup_skipped")
                    return
                if late > LATE_NOTE_S:  # people read it too, just above the turn's answer (the turn tells the model)
                    await self.slack.late(timer, late)
                await self.slack.meta.put(HANDED, timer.request_id, {"at": str(now)})
            await self.dispatch(await self._turn(timer, late))
        await self.timers.complete(claimed)  # its turn says whether it ran

    async def _handed(self, timer: Timer) -> bool:
        return bool((await self.slack.meta.get(HANDED, timer.request_id)).get("at"))

    async def _owner_may(self, timer: Timer) -> bool | None:
        """Whether its owner may still start work there (``allowed_users`` or ``allowed_channels`` may have changed
        since it was made); the configuration's own schedules: the channel rule only. None: not known now (an
        allowed user group Slack would not list) — never taken for a no."""
        direct = timer.channel.startswith("D")
        access = self.slack.access
        if timer.owner == "config":
            allowed = access.config.allowed_channels
            return direct or not allowed or timer.channel in allowed
        verdict = await access.may_use(timer.owner, timer.channel, direct=direct)
        if verdict.key == "no_user" and access.unsure():  # a group that could not be listed, not the person
            log.warning("timer %s: whether %s may use OpsPilot is not known now (Slack); tried again", timer.id,
                        timer.owner)
            return None
        return verdict.allowed

    async def _admitted(self, timer: Timer, door: Door) -> Admitted | None:
        """Whether its owner's and its channel's windows take it (the config owns no window of its own). Nobody
        is there to be told privately: a refused one is skipped with a line saying so."""
        if self.gate is None:
            return Admitted(timer.request_id)
        return await self.gate.admit(door, user="" if timer.owner == "config" else timer.owner,
                                     channel=timer.channel, member=timer.request_id, lang="en",
                                     thread_ts=timer.thread_ts, tell=False)

    async def _turn(self, timer: Timer, late: float) -> Converse:
        lang = await self.slack.lang(timer)
        text = say(lang, "fu_turn", by=f"<@{timer.owner}>", at=time_of(timer.created_at, lang),
                   question=timer.question)
        if late > LATE_NOTE_S:
            text += say(lang, "late", due=time_of(timer.due, lang), minutes=int(late // 60))
        return Converse(channel=timer.channel, thread_ts=timer.thread_ts, user=timer.owner, text=redact(text),
                        request_id=timer.request_id, unattended=True, timer=timer)

    async def _schedule(self, claimed: Claimed, late: float, now: float) -> None:
        timer = claimed.timer
        following = when.next_due(timer.cron, timer.timezone, max(now, timer.due + 1))
        if not await self._handed(timer):  # else: handed on by an instance that died before completing it
            if late > self.grace_s:
                return await self._not_this_time(claimed, following, lambda lang: say(
                    lang, "sc_skipped", due=time_of(timer.due, lang, timer.timezone, with_day=True, now=now),
                    minutes=int(late // 60), grace=int(self.grace_s // 60), label=label(timer),
                    next=time_of(following, lang, timer.timezone, with_day=True, now=now) if following else "—"))
            may = await self._owner_may(timer)
            if may is None:  # Slack could not say who may: left claimed, tried again once its lease ends
                return
            if not may:  # ended: it would run in the name of someone who may not
                return await self._not_this_time(claimed, None, lambda lang: say(
                    lang, "sc_ended_access", label=label(timer), who=kit.who(timer.owner)))
            # Where OpsPilot is not, before the windows: a check that cannot run takes nobody's slot.
            if isinstance(await self.slack.access.bot_in(timer.channel, fresh=True), str):  # nothing shown
                log.warning("schedule %s not run: OpsPilot cannot post in %s", timer.id, timer.channel)
                return await self._not_this_time(claimed, following, None)  # kept: runs once OpsPilot is back
            if not await self._admitted(timer, "schedule"):
                return await self._not_this_time(claimed, following, lambda lang: say(
                    lang, "sc_skipped_limit", label=label(timer)))
            await self.slack.meta.put(HANDED, timer.request_id, {"at": str(now)})
        await self.dispatch(Check(channel=timer.channel, thread_ts=None, user=timer.owner, timer=timer.id,
                                  due=timer.due, request_id=timer.request_id, question=redact(timer.question),
                                  label=label(timer), quiet=timer.quiet, late_s=max(late, 0.0),
                                  timezone=timer.timezone or "UTC"))
        if await self.timers.complete(claimed, following):
            await self.reports.tally(timer.group, "schedule_fired")

    async def _not_this_time(self, claimed: Claimed, following: int | None,
                             line: Callable[[str], str] | None) -> None:
        """A schedule's occurrence not run: completed (waiting for ``following``; None: the schedule ends), its
        ``line`` said in the channel in its language, once per occurrence, and counted."""
        timer = claimed.timer
        if not await self.timers.complete(claimed, following):
            return  # changed since the claim (cancelled, or fired by another): theirs to say
        if line is not None:
            await self.outbox.say(timer.channel, None, line(await self.slack.lang(timer)),
                                  key=f"timer-skip:{timer.id}:{timer.due}")
        await self.reports.tally(timer.group, "schedule_skipped")


@dataclass
class TimerParts:
    """Follow-ups and scheduled checks, assembled for one Slack service."""

    slack: SlackFollowups
    schedules: Schedules
    firer: Firer


def wire(*, core: Assembly, settings: Settings, outbox: SlackOutbox, access: AccessPolicy,
         dispatch: Callable[[WorkItem], Awaitable[None]], executor: Executor) -> TimerParts | None:
    """The parts over the assembly's follow-ups (none without them); scheduled checks run in ``executor``.
    One clock for all (the follow-ups'), so a test moves time for every part at once."""
    followups = core.followups
    if followups is None:
        return None

    def clock() -> float:
        return followups.clock()

    slack = SlackFollowups(followups=followups, outbox=outbox, meta=core.meta, reports=core.reports, access=access,
                           clock=clock)
    schedules = Schedules(timers=followups.timers, slack=slack, outbox=outbox, access=access,
                          configured=settings.schedules, clock=clock)
    executor.followups = slack
    executor.checks = Checks(engine=core.engine, outbox=outbox, meta=core.meta, reports=core.reports,
                             language=settings.slack.language, timers=followups.timers)
    firer = Firer(timers=followups.timers, slack=slack, engine=core.engine, outbox=outbox, reports=core.reports,
                  dispatch=dispatch, misfire_grace_s=settings.misfire_grace_s, clock=clock, on_start=schedules.sync)
    followups.per_person, followups.meta = settings.slack.limits.followups_per_person, core.meta
    schedules.limits = settings.slack.limits
    return TimerParts(slack, schedules, firer)
