"""``opspilot chat``: a terminal conversation with the engine. Steps appear live; questions are
answered at the prompt. The same engine and events Slack uses.

Ctrl-C at the prompt leaves at once; at a question it cancels the run there, so the change asked about is not
made (as is the case when input ends at a question); while the engine works it stops the run (a second Ctrl-C
leaves at once). The conversation keeps the language of its first question, as a Slack thread does.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich.text import Text

from bot.agent.decisions import Confirm, Decision, Decline, ProvideParams
from bot.agent.engine_errors import EngineError, InvalidDecision
from bot.agent.events import Event, PendingView, RunFinished
from bot.agent.outcome import RunOutcome
from bot.assembly import Assembly
from bot.keyboard import Interrupted, Keyboard
from bot.slack.outbound.audit import ran_a_change
from bot.slack.outbound.blocks import field_label, form_ask, gate
from bot.slack.outbound.change_card import plan_rows
from bot.slack.outbound.outputs import fallback_answer
from bot.slack.outbound.progress_words import form_refusal, model_note, status_word
from bot.slack.outbound.words import Lang, headline, language_of, say
from bot.terminal import markup, printer
from core.stops import STOP_WORDING
from core.text import inert
from state import StoreError

_TONES = {"ok": "green", "error": "red", "waiting": "yellow"}
_STOP_TONES = {"done": "ok", "stopped": "waiting", "expired": "waiting", "warning": "error"}


class Console:
    """Renders engine events as terminal lines: coloured by outcome on a terminal (unless NO_COLOR), plain
    otherwise."""

    def __init__(self, out: TextIO, user: str = "local-user", lang: Lang = "en") -> None:
        self.out = out
        self.rich = printer(out)
        self.names = {user: "you"}
        self.lang: Lang = lang  # the conversation's, once its first question is asked
        self.run_id: str | None = None  # the run on screen: what Ctrl-C stops
        self.finished: RunFinished | None = None  # how the run on screen ended: its composed answer's facts

    def say(self, line: str = "", tone: str | None = None) -> None:
        self.rich.print(Text(inert(line), style=_TONES.get(tone or "", "")))
        self.out.flush()

    def prompt(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def answer(self, text: str) -> None:
        """The bot's answer as a person reads it: bold, italics, code and names, not mrkdwn."""
        self.rich.print(markup(inert(text), self.names))  # the model's words: shown, never obeyed
        self.out.flush()

    def words(self, key: str, **values: object) -> str:
        return say(self.lang, key, **values)

    async def __call__(self, event: Event) -> None:
        self.run_id = event.run_id
        if event.type == "model_step":
            key = "chat_step_tools" if event.asked_for_tools else "chat_step_answers"
            self.say("  " + self.words(key, n=event.step, ms=f"{event.latency_ms:.0f}"))
        elif event.type == "tool_call":
            line = Text(f"  → {event.tool}(").append_text(arguments(event.arguments, 120))
            self.rich.print(line.append(")" + (self.words("chat_changes") if event.mutating else "")))
            self.out.flush()
        elif event.type == "tool_result":
            ok = event.status == "ok"
            declined = event.error_code == "declined_by_user"  # a person said no: not a failure
            status = status_word("declined" if declined else event.status, self.lang)
            if ok:
                what = event.tool
            elif event.error_code and event.error_code != event.status and not declined:  # not "cancelled: cancelled"
                what = self.words("chat_failed", tool=event.tool, status=status, code=event.error_code)
            else:
                what = f"{event.tool} {status}"
            mark, tone = ("✓", "ok") if ok else ("⊘", "waiting") if declined else ("✗", "error")
            self.say(f"  {mark} {what} ({event.latency_ms:.0f} ms)", tone)
        elif event.type == "loop_interrupt" and event.pending:
            n = len(event.pending)
            self.say("  " + self.words("chat_waiting_one" if n == 1 else "chat_waiting", n=n), "waiting")
        elif event.type == "run_finished":
            self.finished = event
            # The stop reason's code helps whoever traces the run; in Chinese the headline says it in words.
            code = f" ({event.stop_reason})" if self.lang == "en" else ""
            self.say("  " + self.words("chat_finished", headline=headline(self.lang, event.stop_reason), code=code,
                                       n=event.steps),
                     _STOP_TONES.get(STOP_WORDING[event.stop_reason].tone))


def arguments(values: dict[str, Any], limit: int | None = None) -> Text:
    """A call's arguments as ``name="value"``: names are the tool's, values are data (JSON, in the colour code
    has), the whole cut at ``limit`` characters with "…"."""
    text = Text()
    for i, (name, value) in enumerate(values.items()):
        text.append(inert(f"{', ' if i else ''}{name}=")).append(inert(json.dumps(value, ensure_ascii=False)), "cyan")
    if limit is not None and len(text) > limit:
        text = text[:limit - 1].append("…")
    return text


def _locale_language() -> Lang:
    """The banner's language before any question: the terminal's locale (``LANG=zh_CN.UTF-8``)."""
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        if value := os.environ.get(name):
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


@dataclass
class _Session:
    app: Assembly
    console: Console
    keys: Keyboard
    user: str
    thread: str = field(default_factory=lambda: f"cli-{uuid.uuid4().hex[:8]}")
    fixed: bool = False
    """The language is configured (``slack.language``), not taken from the first question."""
    asked: bool = False
    stopping: bool = False
    left: bool = False
    task: asyncio.Task[int] | None = None
    stopper: asyncio.Future[None] | None = None

    async def read(self, prompt: str) -> str | None:
        self.console.prompt(prompt)
        if self.left:  # Ctrl-C twice while it worked, and the work ended before the cancel reached it
            raise Interrupted
        return await self.keys.line()

    def interrupted(self) -> None:
        """Ctrl-C while the engine works: stop the run, as Slack's Stop does; a second one leaves at once."""
        if self.stopping or self.console.run_id is None:
            self.left = True
            if self.task is not None:
                self.task.cancel()
            return
        self.stopping = True
        self.console.say()
        self.console.say(self.console.words("chat_stopping"), "waiting")
        self.stopper = asyncio.ensure_future(self._stop(self.console.run_id))

    async def _stop(self, run_id: str) -> None:
        try:
            await self.app.engine.cancel(run_id, by=self.user)
        except (EngineError, StoreError) as exc:
            self.console.say(f"! {exc}", "error")

    async def left_at_question(self, outcome: RunOutcome, why: str) -> None:
        """A question nobody will answer here: the run is cancelled there, so the change is not made; what
        the run had already done is said to stand, never that nothing changed."""
        lang = self.console.lang
        tools = ", ".join(dict.fromkeys(p.tool for p in outcome.pending))
        self.console.say()
        try:
            await self.app.engine.cancel(outcome.run_id, by=self.user)
            audit = await self.app.reports.read_audit(200, run_id=outcome.run_id)
        except (EngineError, StoreError) as exc:
            self.console.say(f"! {exc}", "error")
            return
        await self.app.bus.drain()
        made = ran_a_change(audit)
        self.console.say(say(lang, "chat_not_run_after" if made else "chat_not_run", why=say(lang, why), tools=tools),
                         "waiting")


async def _decide(session: _Session, pending: PendingView) -> Decision | None:
    """One question at the prompt, in the conversation's words (the gate's own reason is written for the model)."""
    console, lang, p = session.console, session.console.lang, pending.payload
    if pending.interrupt_type == "confirm_risky":
        console.say()
        console.answer(f"❓ {gate(pending.reason, p, lang)}")
        what = Text(f"{p.get('tool')}(").append_text(arguments(p.get("arguments") or {})).append(")")
        will, _, after = console.words("chat_will_run", what="\0").partition("\0")
        console.rich.print(Text("   " + will).append_text(what).append(after))
        rows = plan_rows(p, lang)
        if rows:  # from → to, as the Slack card shows it
            console.say(f"   {say(lang, 'plan_will_change')}{say(lang, 'colon')}")
            for label, old, new in rows:
                console.rich.print(Text(f"     {inert(label)}{say(lang, 'colon')}").append(inert(old), "cyan")
                                   .append(" → ").append(inert(new), "cyan"))
        if p.get("model_reason"):
            console.say(f"   {say(lang, 'model_reason')}{say(lang, 'colon')}{p['model_reason']}")
        answer = await session.read("   " + console.words("chat_confirm"))
        if answer is None:
            return None
        return Confirm() if answer.strip().lower() in {"y", "yes", "是", "确认"} else Decline("declined at the prompt")
    console.say()
    console.answer(f"❓ {say(lang, 'need_more')} — {form_ask(p, lang)}")
    values: dict[str, str] = {}
    for field_ in p.get("fields", []):
        choices = field_.get("choices") or []
        hint = " / ".join(f"{i + 1}) {c}" for i, c in enumerate(choices))
        label = field_label(str(field_["name"]), lang)
        answer = await session.read(f"   {label}{' — ' + hint if hint else ''}: ")
        if answer is None:
            return None
        answer = answer.strip()
        if answer.isdigit() and 0 < int(answer) <= len(choices):
            answer = choices[int(answer) - 1]
        values[field_["name"]] = answer
    return ProvideParams(values)


async def _settle(session: _Session, outcome: RunOutcome) -> RunOutcome | None:
    """The run's questions answered at the prompt, until it ends. None: a question was left (Ctrl-C, end of
    input) and the run cancelled there."""
    app, console = session.app, session.console
    while outcome.status == "paused":
        await app.bus.drain()  # the steps so far are on screen before the question
        pending = outcome.pending[0]
        try:
            decision = await _decide(session, pending)
        except Interrupted:
            await session.left_at_question(outcome, "chat_interrupted")
            return None
        if decision is None:
            await session.left_at_question(outcome, "chat_input_ended")
            return None
        try:
            outcome = await app.engine.resume_token(pending.token, decision, by=session.user)
        except EngineError as exc:  # a form's answer refused: said in the conversation's language, as on Slack's card
            why = say(console.lang, "form_invalid", problem=form_refusal(exc, console.lang)) \
                if isinstance(exc, InvalidDecision) else str(exc)
            console.say(f"   ! {why}", "error")
            refreshed = await app.engine.run_record(outcome.run_id)
            if refreshed.status != "paused":  # answered or expired meanwhile: show where it ended
                return RunOutcome(refreshed.run_id, refreshed.thread_id, refreshed.status, refreshed.stop_reason,
                                  refreshed.answer)
    return outcome


async def chat(app: Assembly, *, user: str = "local-user", out: TextIO = sys.stdout,
               keys: Keyboard | None = None, language: str = "auto") -> int:
    """The conversation; this process hosts the engine, so it also runs the engine's sweeps. ``language``:
    ``slack.language`` (auto: each conversation its first question's)."""
    console = Console(out, user, "zh" if language == "zh" else "en" if language == "en" else _locale_language())
    session = _Session(app, console, keys or Keyboard(sys.stdin), user, task=asyncio.current_task(),
                       fixed=language in ("en", "zh"))
    session.keys.on_interrupt = session.interrupted
    app.bus.subscribe(console)
    app.sweeps.start()
    session.keys.start()
    try:
        return await _converse(session)
    except asyncio.CancelledError:
        if not session.left:
            raise
        console.say()
        console.say(console.words("chat_bye"))
        return 130
    finally:
        while session.left and session.task is not None and session.task.cancelling():
            session.task.uncancel()  # our own Ctrl-C, not a shutdown: the cleanup below runs as usual
        session.keys.stop()
        await app.sweeps.stop()


async def _converse(session: _Session) -> int:
    app, console = session.app, session.console
    console.answer(console.words("chat_banner"))
    console.answer(model_note(app.model.label, console.lang))
    if app.store.durable:
        console.say(console.words("chat_store_durable"))
    else:
        console.say(console.words("chat_store_memory"), "waiting")
    while True:
        try:
            text = await session.read("\n" + console.words("chat_you"))
        except Interrupted:  # Ctrl-C at the prompt: leave now
            console.say()
            console.say(console.words("chat_bye"))
            return 130
        if text is None:  # end of input: off the prompt's line first
            console.say()
            console.say(console.words("chat_bye"))
            return 0
        if text.strip().lower() in {"quit", "exit", ":q", "退出"}:
            console.say(console.words("chat_bye"))
            return 0
        if not text.strip():
            continue
        if not session.asked and not session.fixed:  # the conversation speaks its first question's language
            console.lang = language_of(text)
        session.asked = True
        # e.g. "restart it" after a Chinese question: the model is told which language this conversation speaks
        context = "" if language_of(text) == console.lang else \
            f"<reply_language>{'Chinese' if console.lang == 'zh' else 'English'}</reply_language>"
        console.run_id, console.finished, session.stopping = None, None, False
        try:
            outcome: RunOutcome | None = await app.engine.ask(session.thread, text, user_id=session.user,
                                                              context=context)
            if outcome is not None:
                outcome = await _settle(session, outcome)
        except (EngineError, StoreError) as exc:
            console.say(f"! {exc}", "error")
            continue
        await app.bus.drain()
        if outcome is not None:
            console.say("\nopspilot>")
            console.answer(_answer(console, outcome))


def _answer(console: Console, outcome: RunOutcome) -> str:
    """The model's answer as written; one OpsPilot composed itself (Stop, a limit, a failure) in the
    conversation's language, from its facts."""
    finished = console.finished
    if finished is not None and finished.run_id == outcome.run_id and finished.fallback is not None:
        return fallback_answer(finished.fallback, console.lang)
    return outcome.answer
