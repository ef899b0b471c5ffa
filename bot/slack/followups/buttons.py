"""Follow-ups and scheduled checks as people see them in Slack: a follow-up's announcement in its thread (with
Cancel), kept true as it runs, is skipped or is cancelled; the "Re-check in 10 min" button under an answer whose
change ran; Cancel from an announcement or App Home; App Home's "Your follow-ups and schedules". Times are shown in
the reader's language (:func:`time_of`); links to threads come from Slack (``chat.getPermalink``).

Who may cancel: anyone who may use OpsPilot in the timer's channel (on-call is a team); a schedule from the
configuration is removed in the configuration.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from bot import when
from bot.followup_tool import PER_THREAD, Followups, Refused, keyed_id
from bot.slack.inbound.access import AccessPolicy
from bot.slack.inbound.run_gate import Admitted, RunGate
from bot.slack.inbound.thread_log import FollowupKind, followup_events, log_followup
from bot.slack.inbound.visibility import Visibility
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.audit import ran_a_change
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.permalinks import permalink
from bot.slack.outbound.thread_meta import THREAD, thread_key
from bot.slack.outbound.words import language_of, say
from state.store import MetaStore, Reports
from state.timer_store import Firing, Timer, TimerStore

log = logging.getLogger(__name__)

CANCELLED = "timer-cancelled"  # a cancelled follow-up or schedule, kept (meta kind, by timer id): see cancel

CANCEL = "opspilot_timer_cancel"
RECHECK = "opspilot_recheck"
RECHECK_MINUTES = 10
"""The Re-check button's delay (the demo shortens it, to show a follow-up while one watches)."""
HOME_LISTED = 10
_DAYS = {"en": ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"),
         "zh": ("周一", "周二", "周三", "周四", "周五", "周六", "周日")}


def time_of(ts: float, lang: str, timezone: str = "UTC", with_day: bool = False, now: float | None = None) -> str:
    """``15:17 UTC``, ``Fri 09:00 UTC+8`` / ``周五 09:00 UTC+8``: the weekday in the reader's language, and a zone
    other than UTC by its offset (an abbreviation is ambiguous: CST is China's, the US's and Cuba's). A moment
    more than six days from ``now`` has its date too (``Tue 1 Apr 2025 09:00``): a monthly check's next run is
    not the coming Tuesday."""
    moment = datetime.fromtimestamp(ts, when.zone(timezone or "UTC"))
    if with_day and abs(ts - (time.time() if now is None else now)) > 6 * 86400:
        day = f"{moment.month}月{moment.day}日 " if lang == "zh" else f"{moment.day} {moment:%b %Y} "
        date = f"{moment.year}年{day}" if lang == "zh" else day
    else:
        date = ""
    minutes = round((moment.utcoffset() or timedelta()).total_seconds() / 60)
    zone = "UTC"
    if minutes:
        hours, rest = divmod(abs(minutes), 60)
        zone += ("+" if minutes > 0 else "-") + str(hours) + (f":{rest:02d}" if rest else "")
    day = _DAYS["zh" if lang == "zh" else "en"][moment.weekday()] + " " if with_day else ""
    return f"{date}{day}{moment:%H:%M} {zone}" if lang == "zh" else f"{day}{date}{moment:%H:%M} {zone}"


def recheck_button(run_id: str, lang: str, minutes: int = RECHECK_MINUTES) -> kit.Block:
    """Under an answer whose change ran (:func:`bot.slack.outbound.audit.ran_a_change`): a follow-up in ``minutes``, on
    behalf of whoever presses it."""
    return {"type": "actions", "block_id": f"recheck:{run_id}"[:255],
            "elements": [kit.button(say(lang, "fu_recheck", minutes=minutes), RECHECK, run_id)]}


LATE_NOTE_S = 60.0
"""Later than this, a follow-up's turn says it runs late."""


def announcement_key(timer_id: str) -> str:
    return f"timer:{timer_id}"


def label(timer: Timer) -> str:
    """A schedule as lists show it: its name (or question), cron and time zone."""
    return f"{kit.escape(timer.name or timer.question)} ({kit.code(timer.cron)} {kit.escape(timer.timezone)})"


class SlackFollowups:
    def __init__(self, *, followups: Followups, outbox: SlackOutbox, meta: MetaStore, reports: Reports,
                 access: AccessPolicy, clock: Callable[[], float] | None = None) -> None:
        self.followups, self.outbox, self.meta, self.reports, self.access = followups, outbox, meta, reports, access
        self.clock = clock or followups.clock
        self.recheck_minutes = RECHECK_MINUTES
        self.visibility = Visibility(access.client, access)
        """Who can read a timer's conversation: App Home lists a timer to its owner only while they can."""
        self.gate: RunGate | None = None
        """Limits on how often runs start (a Re-check press is one)."""
        followups.listeners.append(self.announce)

    @property
    def timers(self) -> TimerStore:
        return self.followups.timers

    async def lang(self, timer: Timer) -> str:
        if timer.thread_ts:
            known = (await self.meta.get(THREAD, thread_key(timer.channel, timer.thread_ts))).get("lang")
            if known:
                return known
        return language_of(timer.question, self.access.config.language)

    # --- a follow-up's announcement, kept true --------------------------------------------------------------

    async def announce(self, timer: Timer) -> None:
        """Idempotent: asked again for one announced already, it logs nothing twice and shows the same message."""
        if not await self._said(timer, "scheduled"):
            await self._log(timer, "scheduled", timer.created_at)
        lang = await self.lang(timer)
        text = say(lang, "fu_announce", due=time_of(timer.due, lang), by=kit.who(timer.owner),
                   question=kit.quoted(timer.question))
        await self._show(timer, text, [kit.mrkdwn(text), {"type": "actions", "block_id": f"timer:{timer.id}",
                                                          "elements": [kit.button(say(lang, "cancel"), CANCEL,
                                                                                  timer.id)]}])

    async def ran(self, timer: Timer, at: float) -> None:
        """Its turn ran (said by the turn, once it has: a follow-up handed on may still find the thread busy)."""
        late = at - timer.due
        if not await self._said(timer, "ran"):
            await self._log(timer, "ran", at)  # once, however often its turn is read
            await self.reports.tally(timer.group, "followup_fired")
        await self._show(timer, await self._ran(timer, at, late if late > LATE_NOTE_S else 0.0))

    async def not_run(self, timer: Timer, key: str = "fu_skipped_busy") -> None:
        """Its turn found the thread busy after all (a question taken meanwhile, a card waiting), or could not start:
        not run — said once, however often its turn is read (handed on twice, redelivered)."""
        if await self._said(timer, "ran", "skipped"):
            return
        await self.skipped(timer, key)
        await self.reports.tally(timer.group, "followup_skipped")

    async def late(self, timer: Timer, late_s: float) -> None:
        """A follow-up handed on late says how late in its thread: a line of its own, just above its turn (not
        "started": its turn may yet find the thread busy)."""
        lang = await self.lang(timer)
        await self.outbox.say(timer.channel, timer.thread_ts, say(
            lang, "fu_late_line", due=time_of(timer.due, lang), minutes=int(late_s // 60), by=kit.who(timer.owner),
            question=kit.quoted(timer.question)), key=f"timer-late:{timer.id}:{timer.due}")

    async def _ran(self, timer: Timer, at: float, late_s: float) -> str:
        lang = await self.lang(timer)
        values = {"at": time_of(at, lang), "by": kit.who(timer.owner), "question": kit.quoted(timer.question)}
        if late_s:
            return say(lang, "fu_ran_late", due=time_of(timer.due, lang), minutes=int(late_s // 60), **values)
        return say(lang, "fu_ran", **values)

    async def skipped(self, timer: Timer, key: str, **values: object) -> None:
        """Said in the thread (a line of its own, so the thread reads in order) and on the announcement."""
        await self._log(timer, "skipped", self.clock(), why=key.removeprefix("fu_skipped_"))  # late, busy, limit
        lang = await self.lang(timer)
        text = say(lang, key, due=time_of(timer.due, lang), question=kit.quoted(timer.question), **values)
        await self.outbox.say(timer.channel, timer.thread_ts, text, key=f"timer-skip:{timer.id}:{timer.due}")
        await self._show(timer, text)

    async def _said(self, timer: Timer, *kinds: FollowupKind) -> bool:
        """Whether the thread's record of its follow-ups already says one of ``kinds`` of this occurrence."""
        logged = await followup_events(self.meta, timer.channel, str(timer.thread_ts))
        return any(e.timer_id == timer.id and e.due == timer.due and e.kind in kinds for e in logged)

    async def _log(self, timer: Timer, kind: FollowupKind, at: float, *, by: str = "", why: str = "") -> None:
        """The thread's record of its follow-ups (an incident summary renders it)."""
        if timer.kind == "followup" and timer.thread_ts:
            await log_followup(self.meta, timer.channel, timer.thread_ts, kind, at, timer_id=timer.id,
                               question=timer.question, due=timer.due, by=by or timer.owner, why=why)

    async def _show(self, timer: Timer, text: str, blocks: list[kit.Block] | None = None) -> None:
        await self.outbox.message(announcement_key(timer.id), timer.channel, timer.thread_ts,
                                  kit.fallback_text(text), blocks or [kit.mrkdwn(text)])

    # --- clicks ------------------------------------------------------------------------------------------------

    async def click_cancel(self, user: str, timer_id: str, channel: str, thread_ts: str | None) -> str:
        """Cancel a follow-up or a schedule from its button. Returns what was said to a click from App Home, which
        has no channel to say it in (its list is published again with it), else ""."""
        timer = await self.timers.get(timer_id)
        if timer is None:
            lang = (await self.meta.get(THREAD, thread_key(channel, thread_ts))).get("lang", "en") \
                if thread_ts else "en"
            if (by := await self.cancelled_before(timer_id, user, channel)) is not None:
                return await self._tell(channel, user, say(lang, "fu_cancelled_by", by=kit.who(by)), thread_ts)
            return await self._tell(channel, user, say(lang, "fu_gone"), thread_ts)
        lang = await self.lang(timer)
        misplaced = bool(channel) and (channel != timer.channel or (thread_ts or None) != (timer.thread_ts or None))
        if misplaced or not await self.visibility.may_see(user, timer.channel, person=timer.owner):
            # A button of another conversation (a forged value: the id seen elsewhere), or from App Home by someone
            # who cannot read its conversation: nothing is done, and nothing about it is said.
            log.warning("cancel of %s %s by %s from %s refused: %s", timer.kind, timer.id, user, channel or "App Home",
                        "another conversation's button" if misplaced else f"they cannot read {timer.channel}")
            return ""
        verdict = await self.access.may_use(user, timer.channel, direct=timer.channel.startswith("D"))
        if not verdict.allowed:
            return await self._tell(channel, user, verdict.words(lang), thread_ts)
        if timer.source == "config":
            return await self._tell(channel, user, say(lang, "sc_config"), thread_ts)
        try:
            cancelled = await self.cancel(timer, user)
        except Firing:  # it is being fired: "cancelled" while its turn ran would be untrue
            firing = f"{'fu' if timer.kind == 'followup' else 'sc'}_firing"
            return await self._tell(channel, user, say(lang, firing), thread_ts)
        if not cancelled:  # another click cancelled it a moment ago: said, not silence
            return await self._tell(channel, user, say(lang, "fu_gone"), thread_ts)
        return ""

    async def cancel(self, timer: Timer, user: str) -> bool:
        """Cancel ``timer`` (already checked: ``user`` may), and say so where it was announced."""
        # The store keeps who cancelled it with the removal itself: a worker dying right after leaves that known.
        if await self.timers.cancel(timer.id, unless_firing=True, by=user) is None:  # (Firing: it is under way)
            return False
        await self._recorded(timer, user)
        return True

    async def _recorded(self, timer: Timer, user: str) -> None:
        # Kept, so that the cancel read again (its worker died before it was said) says it, not "no such check".
        await self.meta.put(CANCELLED, timer.id, {"by": user, "timer": timer.model_dump_json()})
        await self.reports.tally(timer.group, f"{timer.kind}_cancelled")
        await self._said_cancelled(timer, user)

    async def cancelled_before(self, timer_id: str, user: str, channel: str) -> str | None:
        """Who cancelled ``timer_id`` (of ``channel``), when it was cancelled and is gone, its line said again (once:
        keyed) in case its cancel stopped before saying it; None when nothing of it is known."""
        gone = await self.meta.get(CANCELLED, timer_id)
        if gone.get("timer"):
            timer, by = Timer.model_validate_json(gone["timer"]), gone.get("by") or user
        elif (ended := await self.timers.cancelled(timer_id)) is not None and ended[0]:
            (by, timer), gone = ended, {}  # its canceller died before recording it: recorded now
        else:
            return None
        if (channel and timer.channel != channel) or not await self.visibility.may_see(user, timer.channel,
                                                                                      person=timer.owner):
            return None  # another conversation's id (forged, or seen elsewhere): nothing about it is said
        by = by or user
        if not gone:
            await self._recorded(timer, by)
        else:
            await self._said_cancelled(timer, by)
        return by

    async def _said_cancelled(self, timer: Timer, user: str) -> None:
        lang = await self.lang(timer)
        if timer.kind == "followup":
            await self._log(timer, "cancelled", self.clock(), by=user)
            await self._show(timer, say(lang, "fu_cancelled", due=time_of(timer.due, lang), by=kit.who(user),
                                        at=time_of(self.clock(), lang), question=kit.quoted(timer.question)))
        else:
            await self.outbox.say(timer.channel, None, say(lang, "sc_cancelled", by=kit.who(user),
                                                           cron=kit.bare(timer.cron), tz=kit.escape(timer.timezone),
                                                           question=kit.quoted(timer.question)),
                                  key=f"schedule-cancelled:{timer.id}")

    async def click_recheck(self, user: str, run_id: str, channel: str, thread_ts: str | None) -> None:
        thread_id = thread_key(channel, str(thread_ts))
        lang = (await self.meta.get(THREAD, thread_id)).get("lang") or "en"
        verdict = await self.access.may_use(user, channel, direct=channel.startswith("D"))
        if not verdict.allowed or not thread_ts:
            await self._tell(channel, user, verdict.words(lang) or say(lang, "fu_gone"), thread_ts)
            return
        # Offered only under a change that ran; a button posted before that rule (or a made-up run id) is refused here.
        if not ran_a_change(await self.reports.read_audit(200, run_id=run_id)):
            await self._tell(channel, user, say(lang, "fu_recheck_no_change"), thread_ts)
            return
        admitted, key = None, await self._recheck_key(run_id, thread_id, channel, thread_ts)
        # One start per re-check it would schedule (the same press read again, or pressed while that re-check is
        # pending, is the same start): pressing it after a Cancel is a new one, counted again.
        if self.gate is not None and not (admitted := await self.gate.admit(
                "recheck", user=user, channel=channel, member=f"{key}:{user}", lang=lang, thread_ts=thread_ts)):
            return
        try:
            _, fresh = await self.followups.schedule(
                thread_id=thread_id, owner=user, after_minutes=self.recheck_minutes,
                question=say(lang, "fu_recheck_question"), source="button", key=key)
        except Refused as exc:  # its message is the model's (English, with ids): people get the catalog's words
            named = {"too_many_followups_for_person": "fu_refused_person", "too_many_followups": "fu_refused_thread",
                     "busy": "fu_refused_busy"}
            n = self.followups.per_person if exc.code == "too_many_followups_for_person" else PER_THREAD
            words = say(lang, named[exc.code], n=n) if exc.code in named else \
                say(lang, "fu_refused", why=kit.escape(exc) if lang == "en" else kit.code(exc))
            await self._give_back(admitted)
            await self._tell(channel, user, words, thread_ts)
            return
        if not fresh:  # the re-check already pending: this press added nothing
            await self._give_back(admitted)
            await self._tell(channel, user, say(lang, "fu_recheck_taken"), thread_ts)

    async def _give_back(self, admitted: Admitted | None) -> None:
        if self.gate is not None:
            await self.gate.give_back(admitted)

    async def _recheck_key(self, run_id: str, thread_id: str, channel: str, thread_ts: str) -> str:
        """The key of this answer's re-check: the pending one's (pressed again, it is the same re-check), else the
        first not used yet. One that ran, was skipped or cancelled keeps its announcement as it ended: the next
        press is a new follow-up, announced on its own."""
        used = {e.timer_id for e in await followup_events(self.meta, channel, thread_ts)}
        n = 0
        while True:
            key = f"recheck:{run_id}" + (f":{n}" if n else "")
            timer_id = keyed_id(thread_id, key)
            if timer_id not in used or await self.timers.get(timer_id) is not None:
                return key
            n += 1

    async def _tell(self, channel: str, user: str, text: str, thread_ts: str | None) -> str:
        """Said to ``user`` where they clicked; a click in App Home has no channel: ``text`` is returned, for its
        list published again."""
        if not channel or channel == "None":
            return text
        await self.outbox.tell(channel, user, text, thread_ts)
        return ""

    async def handover_lines(self, channel: str, lang: str | None = None) -> list[str]:
        """The channel's pending follow-ups, one line each (``/opspilot handover``): every one still to come,
        whenever it was asked for (one set up before the window falls due in the next shift all the same), in
        ``lang`` — by default the handover's own: the configured language, else English."""
        lang = lang or language_of("", self.access.config.language)
        lines = []
        for timer in await self.timers.every():
            if timer.kind == "followup" and timer.channel == channel:
                link = await permalink(self.access.client, timer.channel, timer.thread_ts)
                line = say(lang, "fu_handover", due=time_of(timer.due, lang), by=kit.who(timer.owner),
                           question=kit.quoted(timer.question))
                lines.append(line + (f" — <{link}|{say(lang, 'home_open_thread')}>" if link else ""))
        return lines

    # --- App Home ----------------------------------------------------------------------------------------------

    async def home_blocks(self, user: str, lang: str = "en") -> list[kit.Block]:
        """The follow-ups and schedules ``user`` set up, each with Cancel, in ``lang`` (their Home's)."""
        mine = [t for t in await self.timers.every()
                if t.owner == user and await self.visibility.may_see(user, t.channel, person=t.owner)][:HOME_LISTED]
        if not mine:
            return [kit.mrkdwn(f"_{say(lang, 'home_no_timers')}_")]
        blocks: list[kit.Block] = []
        now = self.clock()
        for timer in mine:
            if timer.kind == "followup":
                link = await permalink(self.access.client, timer.channel, timer.thread_ts)
                where = f"<{link}|{say(lang, 'home_thread')}>" if link else say(lang, "home_thread")
                line = say(lang, "home_followup", due=time_of(timer.due, lang, with_day=True, now=now), thread=where,
                           question=kit.quoted(timer.question))
            else:
                line = say(lang, "home_check", channel=f"<#{timer.channel}>", label=label(timer),
                           next=time_of(timer.due, lang, timer.timezone, with_day=True, now=now))
            blocks.append({**kit.mrkdwn(line[:kit.SECTION_TEXT]),
                           # one Home view holds many: action ids must differ within a view
                           "accessory": kit.button(say(lang, "cancel"), f"{CANCEL}:{timer.id}"[:255], timer.id)})
        return blocks

