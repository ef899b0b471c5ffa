"""Slack → engine: mentions, thread replies, DMs, the slash command and button clicks become engine calls.

Listeners acknowledge first and hand the work to :meth:`Inbound.spawn`; every piece of work is one unit
with one broad boundary that logs for the operator and tells the user in words. Nothing here renders a
run: that is :mod:`bot.slack.render`, driven by the engine's events.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Coroutine
from typing import Any

from bot.agent.decisions import Confirm, Decision, Decline, ProvideParams
from bot.agent.engine import Engine
from bot.agent.errors import AlreadyHandled, EngineError, InterruptExpired, InvalidDecision, NotPending, ThreadBusy
from bot.slack import blocks as kit
from bot.slack.access import AccessPolicy, Verdict
from bot.slack.meta import CARD, THREAD, thread_key
from bot.slack.metrics import Metrics
from bot.slack.outbox import SlackOutbox
from state import StoreError, Ticket
from state.store import MetaStore

log = logging.getLogger(__name__)

_MENTION = re.compile(r"<@[A-Z0-9]+>\s*")
_IGNORED_SUBTYPES = {None, "thread_broadcast", "file_share"}
STORE_DOWN = ("I can't take questions right now: my state store is unavailable. Ask again in a few minutes; "
              "nothing was changed.")


class Inbound:
    def __init__(self, *, engine: Engine, meta: MetaStore, outbox: SlackOutbox, access: AccessPolicy,
                 metrics: Metrics) -> None:
        self.engine = engine
        self.meta = meta
        self.outbox = outbox
        self.access = access
        self.metrics = metrics
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

    def busy(self) -> bool:
        return bool(self._tasks)

    async def drain(self, timeout_s: float = 30.0) -> None:
        """Wait for background work (tests, graceful shutdown)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._tasks and loop.time() < deadline:
            await asyncio.wait(set(self._tasks), timeout=max(deadline - loop.time(), 0.01))

    # --- messages and the slash command ----------------------------------------------------------------

    async def on_message(self, event: dict[str, Any], event_id: str | None, *, mentioned: bool,
                         bot_user_id: str | None) -> None:
        if event.get("subtype") not in _IGNORED_SUBTYPES or event.get("bot_id") or not event.get("user"):
            return  # edits, deletions, joins, bots (ourselves included) never start a run
        if bot_user_id and event["user"] == bot_user_id:
            return
        channel, ts = str(event["channel"]), str(event["ts"])
        thread_ts = str(event.get("thread_ts") or ts)
        try:
            await self._message(event, event_id, channel, ts, thread_ts, mentioned=mentioned,
                                bot_user_id=bot_user_id)
        except StoreError as exc:  # Redis stayed away longer than the grace period
            log.error("message %s in %s dropped: %s", ts, channel, exc)
            if mentioned or event.get("channel_type") == "im":
                await self.outbox.say(channel, thread_ts, STORE_DOWN)

    async def _message(self, event: dict[str, Any], event_id: str | None, channel: str, ts: str, thread_ts: str,
                       *, mentioned: bool, bot_user_id: str | None) -> None:
        raw = str(event.get("text") or "")
        direct = event.get("channel_type") == "im"
        if not mentioned and not direct:
            if "thread_ts" not in event or (bot_user_id and f"<@{bot_user_id}>" in raw):
                return  # not for us, or the app_mention event handles it
            if not await self.engine.knows_thread(thread_key(channel, thread_ts)):
                return
        if event_id and not await self.meta.first_time(f"event:{event_id}"):
            return
        if not await self.meta.first_time(f"message:{channel}:{ts}"):
            return  # the same message as app_mention and message, or redelivered
        verdict = await self.access.may_use(event["user"], channel, direct=direct)
        if not verdict.allowed:
            await self.outbox.tell(channel, event["user"], verdict.reason, thread_ts=thread_ts)
            return
        text = _MENTION.sub("", raw).strip() or "hello"
        self.spawn(self.converse(channel, thread_ts, event["user"], text), name=f"converse-{channel}-{ts}")

    async def on_command(self, command: dict[str, Any]) -> None:
        channel, user, text = command["channel_id"], command["user_id"], str(command.get("text") or "").strip()
        verdict = await self.access.may_use(user, channel, direct=channel.startswith("D"))
        if not verdict.allowed:
            await self.outbox.tell(channel, user, verdict.reason)
            return
        if not text:
            await self.outbox.tell(channel, user,
                                   "Usage: `/opspilot <question>`, e.g. `/opspilot payments recent errors`")
            return
        root = await self.outbox.post_now(channel, f"<@{user}> asked: {text}"[:3000])
        if root is None:
            await self.outbox.tell(channel, user, "Slack did not take my reply just now; send the command again.")
            return
        await self.converse(channel, root, user, text)

    async def converse(self, channel: str, thread_ts: str, user: str, text: str) -> None:
        thread_id = thread_key(channel, thread_ts)
        try:
            await self.meta.put(THREAD, thread_id, {"channel": channel, "thread_ts": thread_ts})
            await self.engine.ask(thread_id, text, user_id=user)
        except ThreadBusy:
            await self.outbox.tell(channel, user, "I am still working on the previous message in this thread; "
                                                  "send it again in a moment.", thread_ts=thread_ts)
        except EngineError as exc:
            log.warning("thread %s: %s", thread_id, exc)
            await self.outbox.say(channel, thread_ts, f":warning: I could not start: {exc}")
        except StoreError as exc:
            log.error("thread %s: %s", thread_id, exc)  # the operator gets the details, the user does not
            await self.outbox.say(channel, thread_ts, STORE_DOWN)

    # --- clicks ----------------------------------------------------------------------------------------------

    async def on_action(self, body: dict[str, Any], action: dict[str, Any]) -> None:
        action_id, value = str(action.get("action_id", "")), str(action.get("value", ""))
        user = str(body["user"]["id"])
        channel = str((body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id"))
        thread_ts = (body.get("message") or {}).get("thread_ts")
        try:
            if action_id in ("opspilot_stop", "opspilot_resume"):
                await self._run_button(action_id, value, user, channel, thread_ts)
            elif action_id in ("opspilot_confirm", "opspilot_decline", "opspilot_submit"):
                await self._decide(action_id, value, user, channel, thread_ts, body.get("state") or {})
        except StoreError as exc:
            log.error("click %s by %s dropped: %s", action_id, user, exc)
            await self.outbox.tell(channel, user, f"Nothing changed: {STORE_DOWN}", thread_ts)

    async def _run_button(self, action_id: str, run_id: str, user: str, channel: str, thread_ts: str | None) -> None:
        verdict = await self.access.may_use(user, channel, direct=channel.startswith("D"))
        if not verdict.allowed:
            await self.outbox.tell(channel, user, verdict.reason, thread_ts)
            return
        if action_id == "opspilot_stop":
            self.spawn(self._guard(self.engine.cancel(run_id, by=user), channel, user, thread_ts),
                       name=f"stop-{run_id}")
        else:
            self.spawn(self._guard(self.engine.recover(run_id), channel, user, thread_ts), name=f"resume-{run_id}")

    async def _guard(self, work: Awaitable[Any], channel: str, user: str, thread_ts: str | None) -> None:
        try:
            await work
        except EngineError as exc:
            await self.outbox.tell(channel, user, f"Nothing changed: {exc}", thread_ts)
        except StoreError as exc:
            log.error("%s", exc)
            await self.outbox.tell(channel, user, f"Nothing changed: {STORE_DOWN}", thread_ts)

    async def _decide(self, action_id: str, token: str, user: str, channel: str, thread_ts: str | None,
                      state: dict[str, Any]) -> None:
        try:
            ticket = await self.engine.ticket(token)  # the one read a click needs before it is claimed
        except NotPending:
            decided = (await self.meta.get(CARD, token)).get("decided", "")
            text = "This request expired." if decided.startswith(":hourglass:") else \
                f"This request was already handled{f' ({decided})' if decided else ''}."
            await self.outbox.tell(channel, user, text, thread_ts)
            return
        verdict = await self.access.may_use(user, channel, direct=channel.startswith("D"))
        if not verdict.allowed:
            await self.outbox.tell(channel, user, verdict.reason, thread_ts)
            return
        decision, verdict = await self._decision(action_id, ticket, user, channel, state)
        if not verdict.allowed:
            await self.outbox.tell(channel, user, verdict.reason, thread_ts)
            return
        self.spawn(self._answer(ticket, decision, user, channel, thread_ts), name=f"answer-{token[:8]}")

    async def _decision(self, action_id: str, ticket: Ticket, user: str, channel: str,
                        state: dict[str, Any]) -> tuple[Decision, Verdict]:
        """What the click means, and whether this person may make it."""
        pending = ticket.pending
        env = pending.arguments.get("environment")
        if action_id == "opspilot_submit":
            return ProvideParams(kit.form_values(state)), Verdict(True)
        if action_id == "opspilot_confirm":
            verdict = self.access.may_change_in(channel, direct=channel.startswith("D"))
            if verdict.allowed:
                verdict = await self.access.may_confirm(user, pending.call.name, env, ticket.requester)
            return Confirm(), verdict
        verdict = Verdict(True) if user == ticket.requester else \
            await self.access.may_confirm(user, pending.call.name, env, None)
        return Decline(f"declined in Slack by {user}"), verdict

    async def _answer(self, ticket: Ticket, decision: Decision, user: str, channel: str,
                      thread_ts: str | None) -> None:
        try:
            await self.engine.answer(ticket, decision, by=user)
            self.metrics.inc("opspilot_interrupts_resolved_total", how=type(decision).__name__.lower())
        except AlreadyHandled as exc:
            text = "This request expired." if exc.holder == "expiry" else f"Already handled by <@{exc.holder}>."
            await self.outbox.tell(channel, user, text, thread_ts)
        except InterruptExpired:
            await self.outbox.tell(channel, user, "This request expired.", thread_ts)
        except NotPending:
            await self.outbox.tell(channel, user, "This request is no longer pending.", thread_ts)
        except InvalidDecision as exc:
            problem = str(exc)
            token = ticket.pending.token
            card = await self.meta.get(CARD, token)
            if card.get("channel"):  # the form stays, with the error shown
                form = kit.params_form(token, ticket.pending.reason, ticket.pending.payload, error=problem)
                await self.outbox.message(f"card:{token}", card["channel"], card.get("thread_ts"), problem, form)
        except EngineError as exc:
            await self.outbox.tell(channel, user, f"Nothing changed: {exc}", thread_ts)
        except StoreError as exc:
            log.error("%s", exc)
            await self.outbox.tell(channel, user, f"Nothing changed: {STORE_DOWN}", thread_ts)
