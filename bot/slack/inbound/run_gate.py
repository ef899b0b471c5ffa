"""Every way a run starts passes here first: a sliding window per person and one per channel (or DM), on Redis
through :meth:`state.store.MetaStore.admit` (one Lua script, one key per window plus its held marker — a slot of
a Redis Cluster each). A refusal is told to the person only, in the thread's language, with when to try again,
once per hold and conversation (pressing again and again is not answered again and again), and counted in
``/metrics`` (``opspilot_runs_refused_total{door,scope}``) and in ``opspilot stats`` (``refused_person`` and
``refused_channel``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from bot.run_limits import RunLimits
from bot.slack.inbound.work_items import Slots
from bot.slack.outbound.counters import Metrics
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.thread_meta import thread_key
from bot.slack.outbound.words import plural, say
from state.store import MetaStore, Reports

log = logging.getLogger(__name__)

Door = Literal["mention", "reply", "dm", "command", "shortcut", "investigate", "recheck", "followup", "schedule",
               "alert", "summarize", "handover", "rollback", "scheduling"]
Scope = Literal["person", "channel"]


def duration(lang: str, seconds: float) -> str:
    """``42 s`` / ``15 min`` in ``lang`` (a wait is rounded up: "in 0 s" would be a lie)."""
    whole = max(int(-(-seconds // 1)), 1)
    if whole < 120:
        return say(lang, "dur_s", n=whole)
    return say(lang, "dur_min", n=-(-whole // 60))


@dataclass(frozen=True)
class Admitted:
    """A start the windows took (truthy). ``counted``: the windows it took a slot in just now — none when the same
    start was read again — so a start that then starts nothing gives back only what it took (``give_back``)."""
    member: str
    counted: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return True

    def slots(self) -> Slots:
        """What a question carries to its worker, which gives them back if its thread does not take it."""
        return Slots(member=self.member, windows=self.counted)


class RunGate:
    def __init__(self, *, meta: MetaStore, limits: RunLimits, outbox: SlackOutbox, metrics: Metrics | None,
                 reports: Reports | None, clock: Callable[[], float] = time.time) -> None:
        self.meta, self.limits, self.outbox, self.metrics, self.reports = meta, limits, outbox, metrics, reports
        self.clock = clock

    async def admit(self, door: Door, *, user: str, channel: str, member: str, lang: str,
                    thread_ts: str | None = None, tell: bool = True) -> Admitted | None:
        """Whether a run may start through ``door``. ``member`` names this one start: the same start read again
        (a redelivered event, a retried work item) is admitted again, not counted twice. A person's window is
        counted before the channel's: a start the channel then refuses gives the person's slot back, so what the
        person is told next (when they may start again) is true. ``user`` empty (an alert source): the channel's
        window only."""
        windows: list[tuple[Scope, str, int, int]] = [
            ("person", f"runs:person:{user}", self.limits.per_person, self.limits.per_person_window_s),
            ("channel", f"runs:channel:{channel}", self.limits.per_channel, self.limits.per_channel_window_s)]
        counted: list[str] = []  # windows this start was counted in just now
        for scope, name, limit, window_s in windows:
            if limit <= 0 or (scope == "person" and not user):
                continue
            now = self.clock()
            admission = await self.meta.admit(name, member, limit=limit, window_s=window_s, now=now)
            if admission.admitted:
                counted += [name] if admission.new else []
                continue
            for given_back in counted:
                await self.meta.withdraw(given_back, member)
            log.info("%s run by %s in %s refused: %s window full until %.0f", door, user or "-", channel, scope,
                     admission.free_at)
            if self.metrics is not None:
                self.metrics.inc("opspilot_runs_refused_total", door=door, scope=scope)
            if self.reports is not None:
                await self.reports.tally(thread_key(channel, thread_ts or "-"), f"refused_{scope}")
            # Told once per hold in each conversation (a marker per window, person, conversation and hold, which
            # lapses with the hold): pressing again is not answered again, yet a refusal in a DM is not hidden
            # behind one told in a channel, and everyone a channel's hold refuses is told, not only the first.
            if tell and user and await self.meta.first_time(
                    f"limit-told:{name}:{channel}:{user}:{round(admission.free_at * 1000)}", ttl_s=window_s):
                await self.outbox.tell(channel, user, say(
                    lang, f"limit_{scope}", runs=plural(lang, "n_runs", limit), window=duration(lang, window_s),
                    until=time.strftime("%H:%M:%S UTC", time.gmtime(admission.free_at)),
                    wait=duration(lang, admission.free_at - now)), thread_ts)
            return None
        return Admitted(member, tuple(counted))

    async def give_back(self, admitted: Admitted | None) -> None:
        """A start that started nothing after all ("already on it", a refused follow-up): its slots are free again,
        so a later refusal's "you have started N runs" stays true."""
        if admitted is not None:
            for name in admitted.counted:
                await self.meta.withdraw(name, admitted.member)
