"""The Slack surface: turns Slack events and clicks into engine calls, and engine events into messages.

Listeners acknowledge first and hand the work to :meth:`SlackSurface.spawn`; every piece of
work is one unit with one broad boundary that logs for the operator and tells the user in words.
Rendering is driven by the engine's events alone, so a run resumed on another instance keeps
editing the same progress message (its location and state live in Redis).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.decisions import Confirm, Decision, Decline, ProvideParams
from bot.agent.engine import Engine
from bot.agent.errors import AlreadyHandled, EngineError, InterruptExpired, InvalidDecision, NotPending, ThreadBusy
from bot.agent.events import Event, PendingView
from bot.config import SlackConfig
from bot.slack import blocks as kit
from bot.slack.access import AccessPolicy, Verdict
from bot.slack.metrics import Metrics, slack_error
from bot.slack.pacer import Pacer
from bot.slack.progress import META as RUN_META
from bot.slack.progress import ProgressMessage
from core.stops import STOP_WORDING
from state import StoreError
from state.store import Store

log = logging.getLogger(__name__)

THREAD_META, CARD_META, CALL_META = "slack-thread", "slack-card", "slack-callcard"
_MENTION = re.compile(r"<@[A-Z0-9]+>\s*")
_IGNORED_SUBTYPES = {None, "thread_broadcast", "file_share"}
_TONE_ICONS = {"done": ":white_check_mark:", "stopped": ":no_entry_sign:", "expired": ":hourglass:",
               "warning": ":warning:"}
_CARD_ENDINGS = {"expired": ":hourglass: Expired — nothing was run", "cancelled": ":no_entry_sign: Cancelled",
                 "user_replied_instead": ":speech_balloon: Answered in the thread instead"}


def thread_key(channel: str, thread_ts: str) -> str:
    return f"slack:{channel}:{thread_ts}"


class SlackSurface:
    def __init__(self, *, engine: Engine, store: Store, client: AsyncWebClient, access: AccessPolicy,
                 config: SlackConfig, metrics: Metrics, model_label: str, scripted: bool) -> None:
        self.engine = engine
        self.store = store
        self.client = client
        self.access = access
        self.config = config
        self.metrics = metrics
        self.model_note = f"model: {model_label}" if scripted else ""
        self.pacer = Pacer(posts_per_second=config.posts_per_second, updates_per_minute=config.updates_per_minute)
        self._progress: dict[str, ProgressMessage] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # --- background work ---------------------------------------------------------------------------------

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``work`` after the acknowledgement; its failure is logged, never raised into Bolt."""
        async def guarded() -> None:
            try:
                await work
            except Exception:
                log.exception("background work %s failed", name)

        task = asyncio.create_task(guarded(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, timeout_s: float = 30.0) -> None:
        """Wait for background work (tests, graceful shutdown)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self._tasks and asyncio.get_running_loop().time() < deadline:
            await asyncio.wait(set(self._tasks), timeout=max(deadline - asyncio.get_running_loop().time(), 0.01))
        pending = [p for p in self._progress.values() if p._task is not None and not p._task.done()]
        for progress in pending:
            await progress.close()

    async def _call(self, method: str, call: Callable[[], Awaitable[Any]], channel: str | None = None) -> Any:
        await self.pacer.wait(method, channel)
        try:
            return await call()
        except SlackApiError as exc:
            self.metrics.inc("opspilot_slack_api_errors_total", method=method)
            log.warning("Slack %s failed: %s", method, slack_error(exc))
            return None

    async def tell(self, channel: str, user: str, text: str, thread_ts: str | None = None) -> None:
        """An ephemeral message only ``user`` sees."""
        await self._call("chat.postEphemeral", lambda: self.client.chat_postEphemeral(
            channel=channel, user=user, text=text, thread_ts=thread_ts))

    async def say(self, channel: str, thread_ts: str, text: str) -> None:
        await self._call("chat.postMessage", lambda: self.client.chat_postMessage(
            channel=channel, thread_ts=thread_ts, text=kit.fallback_text(text), blocks=[kit.mrkdwn(text)]),
            channel=channel)

    # --- messages and the slash command ----------------------------------------------------------------

    async def on_message(self, event: dict[str, Any], event_id: str | None, *, mentioned: bool,
                         bot_user_id: str | None) -> None:
        if event.get("subtype") not in _IGNORED_SUBTYPES or event.get("bot_id") or not event.get("user"):
            return  # edits, deletions, joins, bots (ourselves included) never start a run
        if bot_user_id and event["user"] == bot_user_id:
            return
        channel, ts, raw = str(event["channel"]), str(event["ts"]), str(event.get("text") or "")
        thread_ts = str(event.get("thread_ts") or ts)
        direct = event.get("channel_type") == "im"
        if not mentioned and not direct:
            if "thread_ts" not in event or (bot_user_id and f"<@{bot_user_id}>" in raw):
                return  # not for us, or the app_mention event handles it
            if await self.store.thread_run(thread_key(channel, thread_ts)) is None:
                return
        if event_id and not await self.store.dedupe(f"event:{event_id}"):
            return
        if not await self.store.dedupe(f"message:{channel}:{ts}"):
            return  # the same message as app_mention and message, or redelivered
        verdict = await self.access.may_use(event["user"], channel, direct=direct)
        if not verdict.allowed:
            await self.tell(channel, event["user"], verdict.reason, thread_ts=thread_ts)
            return
        text = _MENTION.sub("", raw).strip() or "hello"
        self.spawn(self.converse(channel, thread_ts, event["user"], text), name=f"converse-{channel}-{ts}")

    async def on_command(self, command: dict[str, Any]) -> None:
        channel, user, text = command["channel_id"], command["user_id"], str(command.get("text") or "").strip()
        verdict = await self.access.may_use(user, channel, direct=channel.startswith("D"))
        if not verdict.allowed:
            await self.tell(channel, user, verdict.reason)
            return
        if not text:
            await self.tell(channel, user, "Usage: `/opspilot <question>`, e.g. `/opspilot payments recent errors`")
            return
        posted = await self._call("chat.postMessage", lambda: self.client.chat_postMessage(
            channel=channel, text=f"<@{user}> asked: {text}"[:3000]), channel=channel)
        if posted is not None:
            await self.converse(channel, str(posted["ts"]), user, text)

    async def converse(self, channel: str, thread_ts: str, user: str, text: str) -> None:
        thread_id = thread_key(channel, thread_ts)
        try:
            await self.store.put_meta(THREAD_META, thread_id, {"channel": channel, "thread_ts": thread_ts})
            await self.engine.ask(thread_id, text, user_id=user)
        except ThreadBusy:
            await self.tell(channel, user, "I am still working on the previous message in this thread; "
                                           "send it again in a moment.", thread_ts=thread_ts)
        except (EngineError, StoreError) as exc:
            log.warning("thread %s: %s", thread_id, exc)
            await self.say(channel, thread_ts, f":warning: I could not start: {exc}")

    # --- clicks ----------------------------------------------------------------------------------------------

    async def on_action(self, body: dict[str, Any], action: dict[str, Any]) -> None:
        action_id, value = str(action.get("action_id", "")), str(action.get("value", ""))
        user = str(body["user"]["id"])
        channel = str((body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id"))
        thread_ts = (body.get("message") or {}).get("thread_ts")
        if action_id in ("opspilot_stop", "opspilot_resume"):
            await self._run_button(action_id, value, user, channel, thread_ts)
        elif action_id in ("opspilot_confirm", "opspilot_decline", "opspilot_submit"):
            await self._decide(action_id, value, user, channel, thread_ts, body.get("state") or {})

    async def _run_button(self, action_id: str, run_id: str, user: str, channel: str, thread_ts: str | None) -> None:
        verdict = await self.access.may_use(user, channel, direct=channel.startswith("D"))
        if not verdict.allowed:
            await self.tell(channel, user, verdict.reason, thread_ts)
            return
        if action_id == "opspilot_stop":
            self.spawn(self._guard(self.engine.cancel(run_id), channel, user, thread_ts), name=f"stop-{run_id}")
        else:
            self.spawn(self._guard(self.engine.recover(run_id), channel, user, thread_ts), name=f"resume-{run_id}")

    async def _guard(self, work: Awaitable[Any], channel: str, user: str, thread_ts: str | None) -> None:
        try:
            await work
        except (EngineError, StoreError) as exc:
            await self.tell(channel, user, f"Nothing changed: {exc}", thread_ts)

    async def _decide(self, action_id: str, token: str, user: str, channel: str, thread_ts: str | None,
                      state: dict[str, Any]) -> None:
        card = await self.store.get_meta(CARD_META, token)
        found = await self.store.resolve_token(token)
        record = await self.engine.run_record(found[0]) if found else None
        pending = next((p for p in record.pending if p.token == token), None) if record else None
        if record is None or pending is None:
            decided = card.get("decided", "")
            text = "This request expired." if decided.startswith(":hourglass:") else \
                f"This request was already handled{f' ({decided})' if decided else ''}."
            await self.tell(channel, user, text, thread_ts)
            return
        verdict = await self.access.may_use(user, channel, direct=channel.startswith("D"))
        if not verdict.allowed:
            await self.tell(channel, user, verdict.reason, thread_ts)
            return
        env = pending.arguments.get("environment")
        decision: Decision
        if action_id == "opspilot_submit":
            decision = ProvideParams(kit.form_values(state))
            outcome = f":memo: Submitted by <@{user}> at {kit.hhmm()}"
        elif action_id == "opspilot_confirm":
            verdict = self.access.may_change_in(channel, direct=channel.startswith("D"))
            if verdict.allowed:
                verdict = await self.access.may_confirm(user, pending.call.name, env, record.user_id)
            decision, outcome = Confirm(), f":white_check_mark: Confirmed by <@{user}> at {kit.hhmm()}"
        else:
            verdict = Verdict(True) if user == record.user_id else \
                await self.access.may_confirm(user, pending.call.name, env, None)
            decision, outcome = Decline(f"declined in Slack by {user}"), f":x: Declined by <@{user}> at {kit.hhmm()}"
        if not verdict.allowed:
            await self.tell(channel, user, verdict.reason, thread_ts)
            return

        async def mark_decided() -> None:
            await self.close_card(token, outcome)

        self.spawn(self._resume(token, decision, user, channel, thread_ts, pending, mark_decided),
                   name=f"resume-{token[:8]}")

    async def _resume(self, token: str, decision: Decision, user: str, channel: str, thread_ts: str | None,
                      pending: Any, mark_decided: Callable[[], Awaitable[None]]) -> None:
        try:
            await self.engine.resume_token(token, decision, by=user, on_claimed=mark_decided)
            self.metrics.inc("opspilot_interrupts_resolved_total", how=type(decision).__name__.lower())
        except AlreadyHandled as exc:
            text = "This request expired." if exc.holder == "expiry" else f"Already handled by <@{exc.holder}>."
            await self.tell(channel, user, text, thread_ts)
        except InterruptExpired:
            await self.tell(channel, user, "This request expired.", thread_ts)
        except NotPending:
            await self.tell(channel, user, "This request is no longer pending.", thread_ts)
        except InvalidDecision as exc:
            problem = str(exc)
            card = await self.store.get_meta(CARD_META, token)
            if card.get("ts"):  # the form stays, with the error shown
                form = kit.params_form(token, pending.reason, pending.payload, error=problem)
                await self._call("chat.update", lambda: self.client.chat_update(
                    channel=card["channel"], ts=card["ts"], text=problem, blocks=form), channel=card["channel"])
        except (EngineError, StoreError) as exc:
            await self.tell(channel, user, f"Nothing changed: {exc}", thread_ts)

    async def close_card(self, token: str, outcome: str) -> None:
        """Edit a question's card to its final state, once, with no buttons left."""
        card = await self.store.get_meta(CARD_META, token)
        if not card.get("ts") or card.get("decided"):
            return
        await self.store.put_meta(CARD_META, token, {"decided": outcome})
        await self._call("chat.update", lambda: self.client.chat_update(
            channel=card["channel"], ts=card["ts"], text=outcome,
            blocks=kit.decided_card(card.get("summary", ""), outcome)), channel=card["channel"])

    # --- engine events → Slack ---------------------------------------------------------------------------

    async def __call__(self, event: Event) -> None:
        if event.type == "run_started":
            await self._open_progress(event.run_id, event.thread_id)
            return
        progress = await self._progress_for(event.run_id)
        if progress is None:
            return  # not a Slack thread (e.g. the terminal chat sharing the engine)
        lines = progress.state["lines"]
        if event.type == "model_step":
            progress.state["step"] = event.step
        elif event.type == "tool_call":
            detail = ", ".join(f"{k}={v}" for k, v in event.arguments.items())[:80]
            lines.append({"call_id": event.call_id, "tool": event.tool, "status": "running", "detail": detail})
        elif event.type == "tool_result":
            line = progress.line(event.call_id)
            if line is not None:
                line["status"] = event.status
                line["detail"] = event.summary
            ending = _CARD_ENDINGS.get(event.status if event.status == "expired" else event.error_code or "")
            link = await self.store.get_meta(CALL_META, f"{event.run_id}:{event.call_id}")
            if ending and link.get("token"):
                await self.close_card(link["token"], ending)
        elif event.type == "loop_interrupt":
            progress.state["header"] = ":raised_hand: Waiting for you"
            for pending in event.pending:
                line = progress.line(pending.call_id)
                if line is not None:
                    line["status"], line["detail"] = "waiting", pending.reason
                await self._post_card(progress, event.run_id, pending)
            # Paused: the answer may reach any instance, so the state lives in Redis from here on, not here.
            await progress.close()
            self._progress.pop(event.run_id, None)
            return
        elif event.type == "run_finished":
            wording = STOP_WORDING[event.stop_reason]
            progress.state["header"] = f"{_TONE_ICONS[wording.tone]} {wording.headline}"
            progress.state["stoppable"] = False
            await progress.close()
            await self._post_answer(progress, event.run_id, event.answer)
            self._progress.pop(event.run_id, None)
            return
        progress.changed()

    async def _open_progress(self, run_id: str, thread_id: str) -> None:
        where = await self.store.get_meta(THREAD_META, thread_id)
        if not where:
            return
        state: dict[str, Any] = {"run_id": run_id, "header": ":mag: Working on it…", "step": 0, "lines": [],
                                 "stoppable": True, "note": self.model_note, "channel": where["channel"],
                                 "thread_ts": where["thread_ts"]}
        posted = await self._call("chat.postMessage", lambda: self.client.chat_postMessage(
            channel=where["channel"], thread_ts=where["thread_ts"], text="Working on it…",
            blocks=kit.progress_blocks(state)), channel=where["channel"])
        if posted is None:
            return
        await self.store.put_meta(RUN_META, run_id, {"channel": where["channel"], "ts": str(posted["ts"]),
                                                     "progress": json.dumps(state, ensure_ascii=False)})
        self._progress[run_id] = self._make_progress(where["channel"], str(posted["ts"]), state)

    def _make_progress(self, channel: str, ts: str, state: dict[str, Any]) -> ProgressMessage:
        return ProgressMessage(client=self.client, store=self.store, metrics=self.metrics, channel=channel, ts=ts,
                               state=state, interval_s=self.config.progress_interval_s, pacer=self.pacer)

    async def _progress_for(self, run_id: str) -> ProgressMessage | None:
        if run_id in self._progress:
            return self._progress[run_id]
        meta = await self.store.get_meta(RUN_META, run_id)  # the run was started by another instance
        if not meta.get("ts"):
            return None
        progress = self._make_progress(meta["channel"], meta["ts"], json.loads(meta["progress"]))
        self._progress[run_id] = progress
        return progress

    async def _post_card(self, progress: ProgressMessage, run_id: str, pending: PendingView) -> None:
        if pending.interrupt_type == "confirm_risky":
            card = kit.confirm_card(pending.token, pending.reason, pending.payload)
        else:
            card = kit.params_form(pending.token, pending.reason, pending.payload)
        posted = await self._call("chat.postMessage", lambda: self.client.chat_postMessage(
            channel=progress.channel, thread_ts=progress.state["thread_ts"], text=pending.reason, blocks=card),
            channel=progress.channel)
        if posted is None:
            return
        summary = kit.card_summary(pending.interrupt_type, pending.reason, pending.payload)
        await self.store.put_meta(CARD_META, pending.token, {
            "channel": progress.channel, "ts": str(posted["ts"]), "run_id": run_id, "call_id": pending.call_id,
            "summary": summary, "decided": ""})
        await self.store.put_meta(CALL_META, f"{run_id}:{pending.call_id}", {"token": pending.token})

    async def _post_answer(self, progress: ProgressMessage, run_id: str, answer: str) -> None:
        text = answer
        changes = [a for a in await self.store.read_audit(200) if a.get("run_id") == run_id]
        if changes:
            text += "\n\n*Audit*\n" + "\n".join(
                f"• `{a['tool']}` {a['arguments']} — requested by <@{a['requested_by']}>"
                + (f", approved by <@{a['approved_by']}>" if a.get("approved_by") else "")
                + f" — {a['status']}{' (' + a['error_code'] + ')' if a.get('error_code') else ''}"
                for a in reversed(changes))
        for chunk in kit.split_answer(text):
            await self._post(progress.channel, progress.state["thread_ts"], kit.fallback_text(answer), chunk)

    async def _post(self, channel: str, thread_ts: str, text: str, chunk: list[kit.Block]) -> None:
        await self._call("chat.postMessage", lambda: self.client.chat_postMessage(
            channel=channel, thread_ts=thread_ts, text=text, blocks=chunk), channel=channel)

    # --- sweeps (run by the scheduler) ----------------------------------------------------------------------

    async def mark_stalled(self, run_id: str) -> None:
        progress = await self._progress_for(run_id)
        if progress is None:
            return
        progress.state.update(header=":warning: Interrupted by a restart", stoppable=False, resumable=True,
                              note="The worker running this stopped. Finished steps are kept; a change that "
                                   "was running is reported as outcome unknown, never re-run.")
        await progress.close()
        self._progress.pop(run_id, None)

    async def remind(self, channel: str, thread_ts: str, requester: str | None, tool: str, minutes: int) -> None:
        who = f"<@{requester}> " if requester else ""
        await self.say(channel, thread_ts, f":alarm_clock: {who}still waiting for a decision on `{tool}`; "
                                           f"it expires in about {minutes} min.")
