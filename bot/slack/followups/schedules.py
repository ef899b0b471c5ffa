"""Scheduled checks: ``schedules:`` in the config, and ``/opspilot schedule "<cron>" <time zone> <question>`` /
``/opspilot schedules`` (list) / ``/opspilot schedules cancel <id>`` for whoever may use OpsPilot in the channel.

A schedule is a timer (:mod:`state.timer_store`) in its channel's group, due at its next time by its crontab in its
time zone (:mod:`bot.when`). The config's schedules are made to match the file at every start — each one's id is
a digest of what it says, so instances starting together agree, and an edited entry replaces the old one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence

from bot import when
from bot.config import ScheduleConfig
from bot.run_limits import RunLimits
from bot.slack.followups.buttons import SlackFollowups, time_of
from bot.slack.inbound.access import AccessPolicy
from bot.slack.inbound.run_gate import RunGate, duration
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.words import language_of, say, signal
from state.keys import shard_of
from state.meta_store import one_at_a_time
from state.timer_store import Firing, Timer, TimerStore, new_timer_id

log = logging.getLogger(__name__)

PER_CHANNEL = 10
QUESTION_CHARS = 500
_COMMAND = re.compile(r"^[\"“”']([^\"“”']+)[\"“”']\s+(\S+)\s+(.+)$", re.S)


def group_of(channel: str) -> str:
    return f"channel:{channel}"


def config_timer(entry: ScheduleConfig, now: float) -> Timer | None:
    """The timer a config entry stands for (None when its crontab never fires again)."""
    group = group_of(entry.channel)
    digest = hashlib.sha256(json.dumps(entry.model_dump(), sort_keys=True).encode()).hexdigest()[:16]
    due = when.next_due(entry.cron, entry.timezone, now)
    if due is None:
        return None
    return Timer(id=f"{shard_of(group)}.c{digest}", kind="schedule", group=group, channel=entry.channel,
                 owner="config", question=entry.question, created_at=now, due=due, cron=entry.cron,
                 timezone=entry.timezone, quiet=entry.quiet_when_ok, source="config", name=entry.name)


FURTHEST_S = 366 * 24 * 3600
"""A schedule's first run at most this far ahead (a yearly check fits): its records are kept 400 days, renewed as
timers are added and fired."""
TURN_WAIT_S = 10.0
"""How long a person's schedule command waits for another of theirs to be counted and added."""
TURN_HOLD_S = 30
"""A turn's hold, should its process die holding it."""


class Schedules:
    def __init__(self, *, timers: TimerStore, slack: SlackFollowups, outbox: SlackOutbox, access: AccessPolicy,
                 configured: Sequence[ScheduleConfig] = (), clock: Callable[[], float] = time.time) -> None:
        self.timers, self.slack, self.outbox, self.access = timers, slack, outbox, access
        self.configured = list(configured)
        self.clock = clock
        self.limits = RunLimits()
        self.gate: RunGate | None = None
        """Making a schedule posts in the channel (and its cancel once more): it counts as a start, as a handover
        does, so making and cancelling cannot fill a channel."""
        self.person_language: Callable[[str], Awaitable[str]] | None = None
        """A person's language when a command's own words do not say one (App Home's: their latest thread's)."""

    async def sync(self) -> None:
        """Make the kept config schedules match the config (added, or removed when gone from the file)."""
        now = self.clock()
        wanted = {t.id: t for entry in self.configured if (t := config_timer(entry, now)) is not None}
        kept = {t.id for t in await self.timers.every() if t.source == "config"}
        for gone in kept - wanted.keys():
            await self.timers.cancel(gone)
        for timer_id, timer in wanted.items():
            if timer_id not in kept:
                await self.timers.add(timer)
        if wanted.keys() != kept:
            log.info("scheduled checks from the config: %d (%d added, %d removed)", len(wanted),
                     len(wanted.keys() - kept), len(kept - wanted.keys()))

    async def on_command(self, channel: str, user: str, text: str, trigger: str = "") -> bool:
        """True when ``text`` was a ``schedule``/``schedules`` subcommand (and was handled)."""
        word, _, rest = text.strip().partition(" ")
        word = word.lower()
        if word not in ("schedule", "schedules"):
            return False
        verb, _, arg = rest.strip().partition(" ")
        own = "" if word == "schedules" else rest  # the person's own words: "schedules cancel <id>" has none
        lang: str = language_of(own, self.access.config.language)
        if self.access.config.language == "auto" and signal(own) is None and self.person_language is not None:
            lang = await self.person_language(user)  # no words to go by: their latest thread's
        if word == "schedules" and verb.lower() == "cancel":
            await self._cancel(channel, user, arg.strip(), lang)
        elif word == "schedules" and not rest.strip():
            await self.outbox.tell(channel, user, await self.listing(channel, lang))
        elif word == "schedule" and rest.strip():
            await self._create(channel, user, rest, lang, trigger)
        else:
            await self.outbox.tell(channel, user, say(lang, "sc_usage"))
        return True

    async def listing(self, channel: str, lang: str) -> str:
        mine = await self.timers.pending(group_of(channel))
        if not mine:
            return say(lang, "sc_none")
        lines = [say(lang, "sc_line", id=t.id, cron=kit.bare(t.cron), tz=kit.escape(t.timezone),
                     quiet=say(lang, "sc_quiet") if t.quiet else "",
                     next=time_of(t.due, lang, t.timezone, with_day=True, now=self.clock()),
                     by="config" if t.owner == "config" else kit.who(t.owner),
                     question=kit.quoted(t.name or t.question)) for t in mine]
        return "\n".join([say(lang, "sc_list"), *(f"• {line}" for line in lines)])

    async def _create(self, channel: str, user: str, rest: str, lang: str, trigger: str = "") -> None:
        """A schedule, once per command: read again (its worker died before acknowledging it), the command finds
        the schedule it made (its id is the command's) and its announcement (keyed by that id)."""
        group = group_of(channel)
        timer_id = new_timer_id(group, f"command:{trigger}" if trigger else "")
        if trigger and (made := await self.timers.get(timer_id)) is not None:
            await self._announce(made, lang)
            return
        words = rest.split()
        quiet = "--quiet" in words
        found = _COMMAND.match(" ".join(w for w in words if w != "--quiet").strip())
        if found is None:
            await self.outbox.tell(channel, user, say(lang, "sc_usage"))
            return
        cron, timezone, question = found.group(1).strip(), found.group(2), " ".join(found.group(3).split())
        now = self.clock()
        try:
            due = when.next_due(cron, timezone, now)
        except when.WhenError as exc:  # the parser's English where the person's is English, else the catalog's
            why = kit.escape(exc) if lang == "en" or not exc.kind else \
                say(lang, f"sc_bad_{exc.kind}", value=kit.code(exc.value))
            await self.outbox.tell(channel, user, say(lang, "sc_bad", why=why))
            return
        if due is None:
            await self.outbox.tell(channel, user, say(lang, "sc_bad", why=say(lang, "sc_never", cron=kit.bare(cron))))
            return
        if due - now > FURTHEST_S:  # its records would lapse before it ever ran, without a word
            await self.outbox.tell(channel, user, say(lang, "sc_too_far", cron=kit.bare(cron), next=time_of(
                due, lang, timezone, with_day=True, now=now)))
            return
        every = shortest_interval(cron, timezone, due)
        if every is not None and every < self.limits.schedule_min_interval_s:
            await self.outbox.tell(channel, user, say(lang, "sc_too_often", cron=kit.bare(cron),
                                                      every=duration(lang, every),
                                                      minimum=duration(lang, self.limits.schedule_min_interval_s)))
            return
        timer = Timer(id=timer_id, kind="schedule", group=group, channel=channel, owner=user,
                      question=question[:QUESTION_CHARS], created_at=now, due=due, cron=cron, timezone=timezone,
                      quiet=quiet, source="command")
        if not self.limits.schedules_per_person:
            return await self._add(timer, lang)
        # The count and the add, one command of a person's at a time
        async with one_at_a_time(self.slack.meta, f"schedule-cap:{user}", timer_id, hold_s=TURN_HOLD_S,
                                 wait_s=TURN_WAIT_S) as mine:
            if not mine:
                return await self.outbox.tell(channel, user, say(lang, "sc_making"))
            await self._add(timer, lang)

    async def _add(self, timer: Timer, lang: str) -> None:
        """Keep ``timer`` within the person's, the run windows' and the channel's limits, and announce it."""
        channel, user, cap = timer.channel, timer.owner, self.limits.schedules_per_person
        if cap and len([t for t in await self.timers.every() if t.kind == "schedule" and t.owner == user]) >= cap:
            await self.outbox.tell(channel, user, say(lang, "sc_person_full", n=cap))
            return
        admitted = None
        if self.gate is not None and not (admitted := await self.gate.admit(
                "scheduling", user=user, channel=channel, member=f"schedule:{timer.id}", lang=lang)):
            return  # told why, and when to try again
        if await self.timers.add(timer, limit=PER_CHANNEL) == "full":
            if self.gate is not None:
                await self.gate.give_back(admitted)
            await self.outbox.tell(channel, user, say(lang, "sc_full", n=PER_CHANNEL))
            return
        await self._announce(timer, lang)

    async def _announce(self, timer: Timer, lang: str) -> None:
        await self.outbox.say(timer.channel, None, say(
            lang, "sc_created", by=kit.who(timer.owner), cron=kit.bare(timer.cron), tz=kit.escape(timer.timezone),
            quiet=say(lang, "sc_quiet") if timer.quiet else "",
            next=time_of(timer.due, lang, timer.timezone, with_day=True, now=self.clock()),
            question=kit.quoted(timer.question), id=timer.id), key=f"schedule-made:{timer.id}")

    async def _cancel(self, channel: str, user: str, timer_id: str, lang: str) -> None:
        timer = await self.timers.get(timer_id) if timer_id else None
        if timer is None and timer_id and (by := await self.slack.cancelled_before(timer_id, user, channel)):
            await self.outbox.tell(channel, user, say(lang, "fu_cancelled_by", by=kit.who(by)))  # not "no such"
            return
        if timer is None or timer.kind != "schedule" or timer.channel != channel:
            await self.outbox.tell(channel, user, say(lang, "sc_unknown", id=kit.bare(timer_id or "?")))
            return
        if timer.source == "config":
            await self.outbox.tell(channel, user, say(lang, "sc_config"))
            return
        try:
            cancelled = await self.slack.cancel(timer, user)
        except Firing:  # it is being fired right now: cancelled afterwards, or told so
            await self.outbox.tell(channel, user, say(lang, "sc_firing"))
            return
        if not cancelled:
            await self.outbox.tell(channel, user, say(lang, "sc_unknown", id=kit.bare(timer_id)))


SAMPLED = 200
"""Firings looked at for the shortest gap: a day of every-15-minutes, and any crontab's uneven minute list."""


def shortest_interval(cron: str, timezone: str, first: int) -> int | None:
    """The shortest gap, in seconds, between consecutive firings from ``first`` (``0,5 * * * *`` fires 5 minutes
    apart once an hour: its shortest gap is what it costs). None when it fires once only."""
    shortest, at = None, first
    for _ in range(SAMPLED):
        following = when.next_due(cron, timezone, at + 1)
        if following is None:
            break
        gap = following - at
        shortest = gap if shortest is None else min(shortest, gap)
        if shortest < 60:
            break
        at = following
    return shortest
