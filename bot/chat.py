"""``opspilot chat``: a terminal conversation with the engine. Steps appear live; questions are
answered at the prompt. The same engine and events Slack uses."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import TextIO

from bot.agent.decisions import Confirm, Decision, Decline, ProvideParams
from bot.agent.errors import EngineError
from bot.agent.events import Event, PendingView
from bot.agent.run import RunOutcome
from bot.assembly import Assembly
from bot.terminal import markup, printer
from core.stops import STOP_WORDING
from state import StoreError


class Console:
    """Renders engine events as terminal lines."""

    def __init__(self, out: TextIO, user: str = "local-user") -> None:
        self.out = out
        self.rich = printer(out)
        self.names = {user: "you"}

    def say(self, line: str = "") -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def answer(self, text: str) -> None:
        """The bot's answer as a person reads it: bold, italics, code and names, not mrkdwn."""
        self.rich.print(markup(text, self.names))
        self.out.flush()

    async def __call__(self, event: Event) -> None:
        if event.type == "model_step":
            tools = "asks for tools" if event.asked_for_tools else "answers"
            self.say(f"  · step {event.step}: model {tools} ({event.latency_ms:.0f} ms)")
        elif event.type == "tool_call":
            args = json.dumps(event.arguments, ensure_ascii=False)
            self.say(f"  → {event.tool}({args[:120]}){'  [changes things]' if event.mutating else ''}")
        elif event.type == "tool_result":
            mark = "✓" if event.status == "ok" else "✗"
            detail = "" if event.status == "ok" else f" {event.status}: {event.error_code}"
            self.say(f"  {mark} {event.tool}{detail} ({event.latency_ms:.0f} ms)")
        elif event.type == "loop_interrupt" and event.pending:
            self.say(f"  ⏸ waiting for you ({len(event.pending)} question(s))")
        elif event.type == "run_finished":
            headline = STOP_WORDING[event.stop_reason].headline
            self.say(f"  ■ {headline} ({event.stop_reason}) after {event.steps} step(s)")


async def _read(prompt: str) -> str | None:
    sys.stdout.write(prompt)
    sys.stdout.flush()
    line = await asyncio.to_thread(sys.stdin.readline)  # never block the event loop on stdin
    return None if line == "" else line.rstrip("\n")


async def _decide(console: Console, pending: PendingView) -> Decision | None:
    console.say(f"\n❓ {pending.reason}")
    if pending.interrupt_type == "confirm_risky":
        p = pending.payload
        console.say(f"   will run: {p.get('tool')} {json.dumps(p.get('arguments'), ensure_ascii=False)}")
        if p.get("model_reason"):
            console.say(f"   the model's reason: {p['model_reason']}")
        answer = await _read("   confirm? [y/N] ")
        if answer is None:
            return None
        return Confirm() if answer.strip().lower() in {"y", "yes", "是", "确认"} else Decline("declined at the prompt")
    values: dict[str, str] = {}
    for field in pending.payload.get("fields", []):
        choices = field.get("choices") or []
        hint = " / ".join(f"{i + 1}) {c}" for i, c in enumerate(choices))
        answer = await _read(f"   {field['name']}{' — ' + hint if hint else ''}: ")
        if answer is None:
            return None
        answer = answer.strip()
        if answer.isdigit() and 0 < int(answer) <= len(choices):
            answer = choices[int(answer) - 1]
        values[field["name"]] = answer
    return ProvideParams(values)


async def _settle(app: Assembly, console: Console, outcome: RunOutcome, user: str) -> RunOutcome | None:
    while outcome.status == "paused":
        await app.bus.drain()  # the steps so far are on screen before the question
        pending = outcome.pending[0]
        decision = await _decide(console, pending)
        if decision is None:
            return None
        try:
            outcome = await app.engine.resume_token(pending.token, decision, by=user)
        except EngineError as exc:
            console.say(f"   ! {exc}")
            refreshed = await app.engine.run_record(outcome.run_id)
            if refreshed.status != "paused":  # answered or expired meanwhile: show where it ended
                return RunOutcome(refreshed.run_id, refreshed.thread_id, refreshed.status, refreshed.stop_reason,
                                  refreshed.answer)
    return outcome


async def chat(app: Assembly, *, user: str = "local-user", out: TextIO = sys.stdout) -> int:
    """The conversation; this process hosts the engine, so it also runs the engine's sweeps."""
    console = Console(out, user)
    app.bus.subscribe(console)
    app.sweeps.start()
    try:
        return await _converse(app, console, user)
    finally:
        await app.sweeps.stop()


async def _converse(app: Assembly, console: Console, user: str) -> int:
    console.say("OpsPilot chat — type a question; 'quit' to leave.")
    console.say(f"model: {app.model.label}")
    if app.store.durable:
        console.say("store: Redis (durable)")
    else:
        console.say("store: in-process — NOT durable: runs are lost when this process exits")
    thread = f"cli-{uuid.uuid4().hex[:8]}"
    while True:
        text = await _read("\nyou> ")
        if text is None or text.strip().lower() in {"quit", "exit", ":q"}:
            console.say("bye")
            return 0
        if not text.strip():
            continue
        try:
            outcome: RunOutcome | None = await app.engine.ask(thread, text, user_id=user)
            if outcome is not None:
                outcome = await _settle(app, console, outcome, user)
        except (EngineError, StoreError) as exc:
            console.say(f"! {exc}")
            continue
        await app.bus.drain()
        if outcome is None:
            console.say("bye")
            return 0
        console.say("\nopspilot>")
        console.answer(outcome.answer)
