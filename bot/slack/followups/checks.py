"""A scheduled check's occurrence, run and reported.

Each schedule has a conversation of its own (engine thread ``check:<timer id>``, not a Slack thread), so a check
can compare with what the previous ones found, and nothing shows in Slack while it runs. It runs unattended:
it may look, and any change waits for a person — here there is no person in the conversation, so a check that
proposes a change is stopped, and its report says what it proposed.

The report is one message in the channel (keyed by schedule and due time, so a repeated occurrence posts it once),
marked as OpsPilot's status note so a reply in its thread reads it back to the model. With ``quiet_when_ok``
nothing is posted when the check's answer ends with ``Status: OK`` — the line the check's question asks for
(see :data:`STATUS_INSTRUCTION`); any other ending (``Status: ATTENTION``, no status line, a failed or stopped
run) is posted. Every run is counted in ``opspilot stats``, quiet ones included.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Literal

from bot.agent.engine import Engine
from bot.agent.engine_errors import EngineError, ThreadBusy
from bot.agent.outcome import RunOutcome
from bot.slack.followups.buttons import time_of
from bot.slack.inbound.thread_reader import STATUS_NOTE
from bot.slack.inbound.work_items import Check
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.words import language_of, say
from state import StoreError
from state.store import MetaStore, Reports
from state.timer_store import TimerStore

log = logging.getLogger(__name__)

REPORTED = "check-reported"  # a check occurrence whose report is recorded (meta kind, by request id)

STATUS_INSTRUCTION = ("(This is a scheduled check: nobody is waiting in a thread. Look with your read-only tools "
                      "and answer briefly with the evidence. End with a last line of its own: `Status: OK` when "
                      "everything you checked looks normal, or `Status: ATTENTION` when something needs a person.)")
_STATUS = re.compile(r"^[\W_]*status[\W_]*:[\W_]*(ok|attention)[\W_]*$", re.I)
Status = Literal["ok", "attention", "unknown"]


def check_thread(timer_id: str) -> str:
    """The engine thread of one schedule's checks."""
    return f"check:{timer_id}"


def status_of(answer: str) -> tuple[Status, str]:
    """The status the answer ends with, and the answer without that line."""
    lines = answer.rstrip().splitlines()
    found = _STATUS.match(lines[-1].strip()) if lines else None
    if found is None:
        return "unknown", answer.strip()
    return ("ok" if found.group(1).lower() == "ok" else "attention"), "\n".join(lines[:-1]).strip()


class Checks:
    def __init__(self, *, engine: Engine, outbox: SlackOutbox, meta: MetaStore, reports: Reports,
                 language: str = "auto", timers: TimerStore | None = None) -> None:
        self.engine, self.outbox, self.meta, self.reports, self.language = engine, outbox, meta, reports, language
        self.timers = timers
        """Whether the schedule still exists when its check reports (cancelled while the check ran: said so)."""

    async def __call__(self, item: Check) -> None:
        """Never raises: what went wrong is said in the channel (an outage only in the log)."""
        lang = language_of(item.question, self.language)
        try:
            if (await self.meta.get(REPORTED, item.request_id)).get("at"):
                return  # read again after its report was recorded (its worker died before acknowledging it)
            outcome = await self._run(item, lang)
        except ThreadBusy:
            await self._failed(item, lang, say(lang, "sc_busy"))
            return
        except EngineError as exc:  # the engine's reason is English, for operators: quoted in a Chinese line
            await self._failed(item, lang, str(exc) if lang == "en" else f"`{exc}`")
            return
        except StoreError as exc:
            log.error("scheduled check %s (due %s) not run: %s", item.timer, item.due, exc)
            return
        try:
            await self._report(item, lang, outcome)
            # Read again, it would report the run it cancelled (a change proposed) as "Stopped", the proposal gone.
            await self.meta.put(REPORTED, item.request_id, {"at": f"{time.time():.0f}"})
        except StoreError as exc:
            log.error("scheduled check %s (due %s) ran, its report was not recorded: %s", item.timer, item.due, exc)

    async def _run(self, item: Check, lang: str) -> RunOutcome:
        thread = check_thread(item.timer)
        if not await self.engine.handled(thread, item.request_id) and await self.engine.under_way(thread):
            # An earlier check left waiting (stopped before it was cleared): it must not take this question.
            earlier = await self.engine.deps.store.thread_run(thread)
            if earlier:
                await self.engine.cancel(earlier)
        text = say(lang, "check_turn", label=item.label, due=time_of(item.due, lang, item.timezone),
                  question=item.question)
        # The instruction is ours, in English: the answer's language is the question's, said as such.
        reply = f"<reply_language>{'Chinese' if lang == 'zh' else 'English'}</reply_language>"
        outcome = await self.engine.ask(thread, f"{text}\n\n{STATUS_INSTRUCTION}", user_id=item.user,
                                        request_id=item.request_id, unattended=True, context=reply)
        if outcome.status == "paused":  # it proposed a change: nobody here can confirm it
            await self.engine.cancel(outcome.run_id)
        return outcome

    async def _report(self, item: Check, lang: str, outcome: RunOutcome) -> None:
        status, body = status_of(outcome.answer)
        proposed = [p.tool for p in outcome.pending]
        quiet = item.quiet and status == "ok" and not proposed and outcome.stop_reason == "final_answer"
        if await self.meta.first_time(f"check-counted:{item.request_id}"):
            await self.reports.tally(f"channel:{item.channel}", "schedule_quiet" if quiet else "schedule_reported")
        if quiet:
            return
        late = say(lang, "late", due=time_of(item.due, lang, item.timezone), minutes=int(item.late_s // 60)) \
            if item.late_s > 60 else ""
        text = say(lang, "sc_report", label=item.label, late=late) + "\n" + kit.escape(body or "…")
        if self.timers is not None and await self.timers.get(item.timer) is None:
            text += "\n\n" + say(lang, "sc_report_cancelled")  # its "cancelled" line is above: this ran before it
        if proposed:
            text += "\n\n:raised_hand: " + say(lang, "sc_wants_change", tool=kit.bare(", ".join(proposed)))
        for i, blocks in enumerate(kit.split_answer(text)):
            await self.outbox.message(f"{STATUS_NOTE}check:{item.timer}:{item.due}:{i}", item.channel, None,
                                      kit.fallback_text(text if i == 0 else body), blocks)

    async def _failed(self, item: Check, lang: str, why: str) -> None:
        log.warning("scheduled check %s (due %s) failed: %s", item.timer, item.due, why)
        await self.outbox.say(item.channel, None, say(lang, "sc_failed", why=kit.escape(why), label=item.label),
                              key=f"check-failed:{item.timer}:{item.due}")
