"""``opspilot chat``: a terminal conversation with the engine. Steps appear live; questions are
answered at the prompt. The same engine and events Slack uses.

Ctrl-C at the prompt leaves at once; at a question it cancels the run there, so the change asked about is not
made (as is the case when input ends at a question); while the engine works it stops the run (a second Ctrl-C
leaves at once). The conversation keeps the language of its first question, as a Slack thread does.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from dataclasses import dataclass, field
from typing import TextIO

from rich.text import Text

from bot.agent.decisions import Confirm, Decision, Decline, ProvideParams
from bot.agent.errors import EngineError
from bot.agent.events import Event, PendingView
from bot.agent.run import RunOutcome, preview
from bot.assembly import Assembly
from bot.keyboard import Interrupted, Keyboard
from bot.slack.words import language_of, say
from bot.terminal import markup, printer
from core.stops import STOP_WORDING
from state import StoreError

_TONES = {"ok": "green", "error": "red", "waiting": "yellow"}
_STOP_TONES = {"done": "ok", "stopped": "waiting", "expired": "waiting", "warning": "error"}


class Console:
    """Renders engine events as terminal lines: coloured by outcome on a terminal (unless NO_COLOR), plain
    otherwise."""

    def __init__(self, out: TextIO, user: str = "local-user") -> None:
        self.out = out
        self.rich = printer(out)
        self.names = {user: "you"}
        self.run_id: str | None = None  # the run on screen: what Ctrl-C stops

    def say(self, line: str = "", tone: str | None = None) -> None:
        self.rich.print(Text(line, style=_TONES.get(tone or "", "")))
        self.out.flush()

    def prompt(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def answer(self, text: str) -> None:
        """The bot's answer as a person reads it: bold, italics, code and names, not mrkdwn."""
        self.rich.print(markup(text, self.names))
        self.out.flush()

    async def __call__(self, event: Event) -> None:
        self.run_id = event.run_id
        if event.type == "model_step":
            tools = "asks for tools" if event.asked_for_tools else "answers"
            self.say(f"  · step {event.step}: model {tools} ({event.latency_ms:.0f} ms)")
        elif event.type == "tool_call":
            args = preview(json.dumps(event.arguments, ensure_ascii=False), 120)
            self.say(f"  → {event.tool}({args}){'  [changes things]' if event.mutating else ''}")
        elif event.type == "tool_result":
            ok = event.status == "ok"
            detail = "" if ok else f" {event.status}: {event.error_code}"
            tone = "ok" if ok else "error"
            self.say(f"  {'✓' if ok else '✗'} {event.tool}{detail} ({event.latency_ms:.0f} ms)", tone)
        elif event.type == "loop_interrupt" and event.pending:
            self.say(f"  ⏸ waiting for you ({len(event.pending)} question(s))", "waiting")
        elif event.type == "run_finished":
            wording = STOP_WORDING[event.stop_reason]
            self.say(f"  ■ {wording.headline} ({event.stop_reason}) after {event.steps} step(s)",
                     _STOP_TONES.get(wording.tone))


@dataclass
class _Session:
    app: Assembly
    console: Console
    keys: Keyboard
    user: str
    thread: str = field(default_factory=lambda: f"cli-{uuid.uuid4().hex[:8]}")
    lang: str | None = None
    """The conversation's language: its first question's."""
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
        self.console.say(say(self.lang or "en", "chat_stopping"), "waiting")
        self.stopper = asyncio.ensure_future(self._stop(self.console.run_id))

    async def _stop(self, run_id: str) -> None:
        try:
            await self.app.engine.cancel(run_id, by=self.user)
        except (EngineError, StoreError) as exc:
            self.console.say(f"! {exc}", "error")

    async def left_at_question(self, outcome: RunOutcome, why: str) -> None:
        """A question nobody will answer here: the run is cancelled there, so the change is not made; what
        the run had already done is said to stand, never that nothing changed."""
        lang = self.lang or "en"
        tools = ", ".join(dict.fromkeys(p.tool for p in outcome.pending))
        self.console.say()
        try:
            await self.app.engine.cancel(outcome.run_id, by=self.user)
            audit = await self.app.reports.read_audit(200, run_id=outcome.run_id)
        except (EngineError, StoreError) as exc:
            self.console.say(f"! {exc}", "error")
            return
        await self.app.bus.drain()
        made = any(a.get("status") == "ok" or a.get("error_code") == "outcome_unknown" for a in audit)
        self.console.say(say(lang, "chat_not_run_after" if made else "chat_not_run", why=say(lang, why), tools=tools),
                         "waiting")


async def _decide(session: _Session, pending: PendingView) -> Decision | None:
    console = session.console
    console.say(f"\n❓ {pending.reason}")
    if pending.interrupt_type == "confirm_risky":
        p = pending.payload
        console.say(f"   will run: {p.get('tool')} {json.dumps(p.get('arguments'), ensure_ascii=False)}")
        if p.get("model_reason"):
            console.say(f"   the model's reason: {p['model_reason']}")
        answer = await session.read("   confirm? [y/N] ")
        if answer is None:
            return None
        return Confirm() if answer.strip().lower() in {"y", "yes", "是", "确认"} else Decline("declined at the prompt")
    values: dict[str, str] = {}
    for field_ in pending.payload.get("fields", []):
        choices = field_.get("choices") or []
        hint = " / ".join(f"{i + 1}) {c}" for i, c in enumerate(choices))
        answer = await session.read(f"   {field_['name']}{' — ' + hint if hint else ''}: ")
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
        except EngineError as exc:
            console.say(f"   ! {exc}", "error")
            refreshed = await app.engine.run_record(outcome.run_id)
            if refreshed.status != "paused":  # answered or expired meanwhile: show where it ended
                return RunOutcome(refreshed.run_id, refreshed.thread_id, refreshed.status, refreshed.stop_reason,
                                  refreshed.answer)
    return outcome


async def chat(app: Assembly, *, user: str = "local-user", out: TextIO = sys.stdout,
               keys: Keyboard | None = None) -> int:
    """The conversation; this process hosts the engine, so it also runs the engine's sweeps."""
    console = Console(out, user)
    session = _Session(app, console, keys or Keyboard(sys.stdin), user, task=asyncio.current_task())
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
        console.say("bye")
        return 130
    finally:
        while session.left and session.task is not None and session.task.cancelling():
            session.task.uncancel()  # our own Ctrl-C, not a shutdown: the cleanup below runs as usual
        session.keys.stop()
        await app.sweeps.stop()


async def _converse(session: _Session) -> int:
    app, console = session.app, session.console
    console.say("OpsPilot chat — type a question; 'quit' to leave.")
    console.say(f"model: {app.model.label}")
    if app.store.durable:
        console.say("store: Redis (durable)")
    else:
        console.say("store: in-process — NOT durable: runs are lost when this process exits", "waiting")
    while True:
        try:
            text = await session.read("\nyou> ")
        except Interrupted:  # Ctrl-C at the prompt: leave now
            console.say()
            console.say("bye")
            return 130
        if text is None:  # end of input: off the prompt's line first
            console.say()
            console.say("bye")
            return 0
        if text.strip().lower() in {"quit", "exit", ":q"}:
            console.say("bye")
            return 0
        if not text.strip():
            continue
        session.lang = session.lang or language_of(text)
        # e.g. "restart it" after a Chinese question: the model is told which language this conversation speaks
        context = "" if language_of(text) == session.lang else \
            f"<reply_language>{'Chinese' if session.lang == 'zh' else 'English'}</reply_language>"
        console.run_id, session.stopping = None, False
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
            console.answer(outcome.answer)
