"""Slack → work: mentions, thread replies, DMs, the slash command and button clicks become work items.

Listeners acknowledge first; this checks (dedupe, who may do what, the ticket a click opens) and hands a
:data:`bot.slack.inbound.work_items.WorkItem` on — to this process's executor, or to the queue for the workers. It never
runs the engine's turns itself, and never renders a run (that is :mod:`bot.slack.render`)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from bot.agent.engine import Engine
from bot.agent.engine_errors import EngineError, NotPending
from bot.slack.alerts.investigations import INVESTIGATE, Alerts
from bot.slack.feedback.votes import Feedback
from bot.slack.followups.buttons import CANCEL as TIMER_CANCEL
from bot.slack.followups.buttons import RECHECK
from bot.slack.home.tab import Home
from bot.slack.inbound.access import AccessPolicy, Verdict, refusal
from bot.slack.inbound.background import Background
from bot.slack.inbound.receipt import Receipt
from bot.slack.inbound.run_gate import Admitted, Door, RunGate
from bot.slack.inbound.thread_reader import render, rich_text
from bot.slack.inbound.work import CLICK_LOST, STORE_DOWN
from bot.slack.inbound.work_items import Answer, Converse, RunButton, WorkItem
from bot.slack.incidents.commands import IncidentCommands
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.counters import Metrics
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.people import People
from bot.slack.outbound.responses import respond
from bot.slack.outbound.thread_meta import CARD, THREAD, channel_of, known_lang, thread_key
from bot.slack.outbound.thread_start import ThreadStarts
from bot.slack.outbound.words import language_of, say, signal
from bot.slack.rollbacks.offer import ROLLBACK, parse
from bot.slack.rollbacks.press import RollbackPress
from core.quote import attached, own_words
from core.redact import redact
from state import StoreError, Ticket
from state.store import MetaStore, Reports

if TYPE_CHECKING:
    from bot.slack.followups.firing import TimerParts

log = logging.getLogger(__name__)

_MISPLACED = refusal("misplaced")
_IGNORED_SUBTYPES = {None, "thread_broadcast", "file_share"}
Dispatch = Callable[[WorkItem], Awaitable[None]]
"""Hands work on: to this process's executor, or to the work queue for the workers."""


class Inbound:
    def __init__(self, *, engine: Engine, meta: MetaStore, outbox: SlackOutbox, access: AccessPolicy,
                 dispatch: Dispatch, alerts: Alerts | None = None, people: People | None = None,
                 home: Home | None = None, reports: Reports | None = None, metrics: Metrics | None = None,
                 feedback: Feedback | None = None) -> None:
        self.engine, self.feedback, self.home, self.reports, self.metrics = engine, feedback, home, reports, metrics
        self.people = people or People(access.client)
        self.alerts = alerts
        self.alert_source = access.config.alert_source
        self.meta, self.outbox, self.access, self.dispatch = meta, outbox, access, dispatch
        self.incidents = IncidentCommands(engine=engine, meta=meta, outbox=outbox, access=access, reports=reports)
        self.starts = ThreadStarts(client=outbox.client, pacer=outbox.pacer, meta=meta, metrics=outbox.metrics)
        self.timers: TimerParts | None = None
        self.gate: RunGate | None = None  # limits on how often runs start (set where the service wires them)
        self.tasks = Background()
        self.rollbacks = RollbackPress(
            meta=meta, outbox=outbox, dispatch=lambda item: self.dispatch(item), lang=lambda c, t: self._lang(c, t),
            admit=lambda u, c, m, t: self._admit("rollback", u, c, m, t), give_back=self._give_back)

    # --- messages and the slash command ----------------------------------------------------------------

    async def on_message(self, event: dict[str, Any], event_id: str | None, *, mentioned: bool,
                         bot_user_id: str | None) -> None:
        changed = event.get("subtype") == "message_changed" and isinstance(event.get("message"), dict)
        if changed:  # an alert edited in place to say "resolved" (an unfurl or a broadcast is no edit: nothing new)
            if not event["message"].get("edited"):
                return
            event = {**event["message"], "channel": event.get("channel")}
        source = self.alert_source(str(event.get("channel")), event) \
            if event.get("subtype") in (None, "bot_message") else None
        if changed and source is None:
            return  # an edit starts nothing
        if source is not None and self.alerts is not None:
            return await self.alerts.on_alert(event, source)
        if event.get("subtype") not in _IGNORED_SUBTYPES or event.get("bot_id") or not event.get("user"):
            return  # edits, deletions, joins, bots (ourselves included) never start a run
        if bot_user_id and event["user"] == bot_user_id:
            return
        channel, ts = str(event["channel"]), str(event["ts"])
        thread_ts = str(event.get("thread_ts") or ts)
        try:
            await self._message(event, event_id, channel, ts, thread_ts, mentioned=mentioned, bot_user_id=bot_user_id)
        except StoreError as exc:  # Redis stayed away longer than the grace period
            ref = uuid.uuid4().hex[:8]
            log.error("message %s in %s dropped (ref %s): %s", ts, channel, ref, exc)
            if mentioned or event.get("channel_type") == "im":  # the thread's language as last seen, else the words'
                lang = known_lang(self.meta, channel, thread_ts) or language_of(str(event.get("text") or ""),
                                                                                self.access.config.language)
                await self.outbox.store_down(channel, say(lang, STORE_DOWN), ref=ref, thread_ts=thread_ts, lang=lang)

    async def _message(self, event: dict[str, Any], event_id: str | None, channel: str, ts: str, thread_ts: str,
                       *, mentioned: bool, bot_user_id: str | None) -> None:
        raw = str(event.get("text") or "")
        direct = event.get("channel_type") == "im"
        if not mentioned and not direct:
            if "thread_ts" not in event or (bot_user_id and f"<@{bot_user_id}>" in raw):
                return  # not for us, or the app_mention event handles it
            if not await self.engine.knows_thread(thread_key(channel, thread_ts)):
                return
            if self.alerts is not None and not await self.alerts.answers_unmentioned(channel, thread_ts):
                return  # an alert's thread: colleagues coordinating there are not talking to OpsPilot
        if event_id and not await self.meta.first_time(f"event:{event_id}"):
            return
        if not await self.meta.first_time(f"message:{channel}:{ts}"):
            return  # the same message as app_mention and message, or redelivered
        verdict = await self.access.may_use(event["user"], channel, direct=direct)
        if not verdict.allowed:
            await self._refuse(channel, event["user"], verdict, thread_ts, asked=raw)
            return
        text = await self.people.plain(raw or rich_text(event.get("blocks") or []), me=bot_user_id)
        text = kit.unescape(text) if raw else text  # rich text is as typed already
        files = [str(f.get("name") or f.get("title") or "a file") for f in event.get("files") or []]
        if files and not text:
            await self.outbox.tell(channel, event["user"], say(await self._lang(channel, thread_ts, raw),
                                                               "files_unread"), thread_ts=thread_ts)
            return
        if mentioned and await self.incidents.on_mention(channel, thread_ts, ts, event["user"], text):
            return  # "@OpsPilot summarize" in a thread: a summary, not a question
        text = redact(attached(text, files)) or "hello"  # the queue is Redis too: no secret goes there
        door: Door = "dm" if direct else "mention" if mentioned else "reply"
        lang = await self._lang(channel, thread_ts, raw, event["user"])
        if not (admitted := await self._admit(door, event["user"], channel, f"{channel}:{ts}", thread_ts, lang=lang)):
            return
        await self.dispatch(Converse(channel=channel, thread_ts=thread_ts, user=event["user"], text=text, ts=ts,
                                     request_id=f"{channel}:{ts}", lang="zh" if lang == "zh" else "en",
                                     slots=admitted.slots()))
        await self._asked(event["user"], channel, thread_ts, own_words(text))  # their words: no note of ours

    async def on_command(self, command: dict[str, Any]) -> None:
        channel, user = command["channel_id"], command["user_id"]
        text = redact(kit.unescape(str(command.get("text") or "")).strip())
        # A command has no event id, but every invocation its own trigger: a replayed request is one run.
        trigger = str(command.get("trigger_id") or "")
        ident = trigger or uuid.uuid4().hex  # this command's own name: its limits' member, its thread's key
        if trigger and not await self.meta.first_time(f"command:{trigger}"):
            log.warning("a replayed /opspilot request (trigger %s) was ignored", trigger)
            return
        verdict = await self.access.may_start(user, channel)
        if not verdict.allowed:
            await self._refuse(channel, user, verdict, None, asked=text, reply=str(command.get("response_url") or ""))
            return
        if not text:  # no words to go by: the person's latest thread's language
            return await self.outbox.tell(channel, user, say(await self._lang(channel, None, "", user), "slash_usage"))
        if await self.incidents.on_command(channel, user, text, trigger=ident):
            return  # `/opspilot summary …` or `/opspilot handover …`
        if self.timers is not None and await self.timers.schedules.on_command(channel, user, text, trigger):
            return  # `/opspilot schedule …` or `/opspilot schedules …`
        lang = await self._lang(channel, None, text, user)  # the thread it starts speaks the question's
        if not await self._admit("command", user, channel, f"command:{ident}", None, lang=lang):
            return  # before its thread is started: a refused command leaves nothing in the channel
        root, error = await self.starts.start(channel, say(lang, "slash_asked", who=f"<@{user}>",
                                                           text=kit.escape(text))[:3000], f"command:{ident}")
        if root is None:
            # Not in this channel, or a DM between two people: the command's response_url still reaches them.
            log.warning("/opspilot in %s could not start a thread: %s", channel, error)
            known = error in ("not_in_channel", "channel_not_found", "is_archived", "unconfirmed")
            await respond(str(command.get("response_url") or ""),
                          say(lang, f"cannot_post_{error}" if known else "cannot_post"))
            return
        await self.dispatch(Converse(channel=channel, thread_ts=root, user=user, text=text,
                                     request_id=f"{channel}:{root}", lang="zh" if lang == "zh" else "en"))
        await self._asked(user, channel, root, text)

    # --- clicks ----------------------------------------------------------------------------------------------

    async def on_action(self, body: dict[str, Any], action: dict[str, Any]) -> None:
        action_id, value = str(action.get("action_id", "")), str(action.get("value", ""))
        user = str(body["user"]["id"])
        channel = str((body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id") or "")
        thread_ts = (body.get("message") or {}).get("thread_ts")
        # App Home's one button (cancel a follow-up) has no conversation; every other lives in one.
        if not channel and not ((body.get("view") or {}).get("type") == "home" and action_id.startswith(TIMER_CANCEL)):
            log.warning("%s by %s with no conversation ignored", action_id, user)
            return
        try:
            if action_id in ("opspilot_stop", "opspilot_resume"):
                await self._run_button(action_id, value, user, channel, thread_ts)
            elif action_id in ("opspilot_confirm", "opspilot_decline", "opspilot_submit"):
                receipt = Receipt(str(body.get("response_url") or ""), body.get("message") or {}, user, action_id,
                                  language=self.access.config.language)
                recorded = False
                try:
                    recorded = await self._decide(action_id, value, user, channel, thread_ts, body.get("state") or {},
                                                  receipt)
                finally:  # a decision not recorded (refused, or the store away past its grace) puts the card back
                    await receipt.settle(recorded, self.meta, value)
            elif action_id == INVESTIGATE:
                await self._investigate(value, user, channel, thread_ts)
            elif action_id == ROLLBACK:
                await self._rollback(body, value, user, channel, thread_ts)
            elif action_id.startswith(kit.FEEDBACK) and self.feedback is not None:
                await self.feedback.click(body, value, user, channel, thread_ts)
            elif action_id.partition(":")[0] in (TIMER_CANCEL, RECHECK) and self.timers is not None:
                await self._timer_click(body, action_id.partition(":")[0], value, user, channel, thread_ts)
        except StoreError as exc:
            ref = uuid.uuid4().hex[:8]
            log.error("click %s by %s dropped (ref %s): %s", action_id, user, ref, exc)
            lang = known_lang(self.meta, channel, thread_ts) or language_of(  # the store is away: as this process
                kit.shown(body.get("message") or {}), self.access.config.language)  # knew it, else the message's
            await self.outbox.store_down(channel, say(lang, CLICK_LOST), ref=ref, thread_ts=thread_ts, user=user,
                                         lang=lang)

    async def _timer_click(self, body: dict[str, Any], action_id: str, value: str, user: str, channel: str,
                           thread_ts: str | None) -> None:
        assert self.timers is not None
        if action_id == RECHECK:
            if not await self._of_thread(value, channel, thread_ts):  # refused as Stop, Confirm and 👎 are
                log.warning("re-check by %s in %s/%s for run %s of another thread refused", user, channel,
                            thread_ts, value)
                return await self._refuse(channel, user, _MISPLACED, thread_ts)
            return await self.timers.slack.click_recheck(user, value, channel, thread_ts)
        said = await self.timers.slack.click_cancel(user, value, channel, thread_ts)
        if (body.get("view") or {}).get("type") == "home" and self.home is not None:
            await self.home.publish(user, notice=said)  # the list without the one cancelled, or why it is not

    async def _investigate(self, alert_ts: str, user: str, channel: str, thread_ts: str | None) -> None:
        verdict = await self.access.may_use(user, channel, direct=channel.startswith("D"))
        if not verdict.allowed or self.alerts is None or thread_ts != alert_ts:
            return await self._refuse(channel, user, verdict if not verdict.allowed else _MISPLACED, thread_ts)
        # One start per presser: given back when it starts nothing, it never takes another presser's slot with it.
        lang = await self.alerts.language(channel, alert_ts)  # the alert's, which a new thread has no record of
        if not (admitted := await self._admit("investigate", user, channel, f"investigate:{channel}:{alert_ts}:{user}",
                                              thread_ts, lang=lang)):
            return
        if problem := await self.alerts.investigate(channel, alert_ts, user, admitted.slots()):
            await self._give_back(admitted)  # "already on it", "too old": nothing started, so nothing counts
            await self.outbox.tell(channel, user, problem, thread_ts)

    async def _rollback(self, body: dict[str, Any], value: str, user: str, channel: str,
                        thread_ts: str | None) -> None:
        target = parse(value) or {"run": ""}  # a forged or damaged value names no run of this thread
        if await self._may_press(ROLLBACK, target["run"], user, channel, thread_ts):
            await self.rollbacks(body, target, user, channel, thread_ts)

    async def on_home_opened(self, event: dict[str, Any]) -> None:
        if event.get("tab") == "home" and event.get("user") and self.home is not None:
            await self.home.publish(str(event["user"]))

    async def _asked(self, user: str, channel: str, thread_ts: str, text: str) -> None:
        if self.home is not None:
            await self.home.asked(user, channel, thread_ts, text)

    async def _admit(self, door: Door, user: str, channel: str, member: str, thread_ts: str | None, *,
                     lang: str = "") -> Admitted | None:
        """Whether the person's and the channel's windows take one more run (told when not, in ``lang``)."""
        if self.gate is None:
            return Admitted(member)
        lang = lang or await self._lang(channel, thread_ts, "", user)
        return await self.gate.admit(door, user=user, channel=channel, member=member, lang=lang, thread_ts=thread_ts)

    async def _give_back(self, admitted: Admitted) -> None:
        if self.gate is not None:
            await self.gate.give_back(admitted)

    async def _lang(self, channel: str, thread_ts: str | None, asked: str = "", user: str = "") -> str:
        """The thread's; a new one's: configured, else the question's as typed, else the person's latest thread's."""
        known = (await self.meta.get(THREAD, thread_key(channel, thread_ts))).get("lang") if thread_ts else None
        if known or self.access.config.language in ("en", "zh"):
            return known or self.access.config.language
        return signal(asked) or (await self.home.language(user) if user and self.home is not None else "en")

    async def _refuse(self, channel: str, user: str, verdict: Verdict, thread_ts: str | None,
                      asked: str = "", reply: str = "") -> None:
        """A refusal, to one person, in the thread's language (a DM between people: through ``reply``)."""
        words = verdict.words(await self._lang(channel, thread_ts, asked, user))
        if verdict.unpostable:
            return await respond(reply, words)
        await self.outbox.tell(channel, user, words, thread_ts)

    async def on_shortcut(self, body: dict[str, Any]) -> None:
        """"Investigate with OpsPilot" on any message: a run in that message's thread, about it — unattended, as
        the Investigate button's: the question is ours and the message (an alert's text) drives it, so any change it
        leads to waits for a person's Confirm."""
        user, channel = str(body["user"]["id"]), str((body.get("channel") or {}).get("id"))
        message = body.get("message") or {}
        ts = str(message.get("ts") or "")
        thread_ts = str(message.get("thread_ts") or ts)
        trigger = str(body.get("trigger_id") or f"{channel}:{ts}:{user}")
        if not ts or not await self.meta.first_time(f"shortcut:{trigger}"):
            return
        verdict = await self.access.may_start(user, channel)
        if not verdict.allowed:
            await self._refuse(channel, user, verdict, thread_ts, reply=str(body.get("response_url") or ""))
            return
        lang = await self._lang(channel, thread_ts, str(message.get("text") or ""), user)  # theirs, not our template's
        if not (admitted := await self._admit("shortcut", user, channel, f"shortcut:{trigger}", thread_ts, lang=lang)):
            return
        context = redact(render([message], ts, 1, self.access.config.thread_context_chars, here=channel))
        await self.dispatch(Converse(
            channel=channel, thread_ts=thread_ts, user=user, context=context, lang="zh" if lang == "zh" else "en",
            text=say(lang, "shortcut_question", user=user),
            request_id=f"{channel}:{ts}:shortcut:{trigger}", unattended=True, slots=admitted.slots()))

    async def _run_button(self, action_id: str, run_id: str, user: str, channel: str, thread_ts: str | None) -> None:
        if await self._may_press(action_id, run_id, user, channel, thread_ts):
            await self.dispatch(RunButton(kind="stop" if action_id == "opspilot_stop" else "resume", run_id=run_id,
                                          user=user, channel=channel, thread_ts=thread_ts))

    async def _may_press(self, action_id: str, run_id: str, user: str, channel: str, thread_ts: str | None) -> bool:
        """A button naming a run: the person may use OpsPilot here, and the run is this thread's (told if not)."""
        verdict = await self.access.may_use(user, channel, direct=channel.startswith("D"))
        if verdict.allowed and await self._of_thread(run_id, channel, thread_ts):
            return True
        if verdict.allowed:
            log.warning("%s by %s in %s/%s for run %s of another thread refused", action_id, user, channel,
                        thread_ts, run_id)
        await self._refuse(channel, user, verdict if not verdict.allowed else _MISPLACED, thread_ts)
        return False

    async def _of_thread(self, run_id: str, channel: str, thread_ts: str | None) -> bool:
        """Whether ``run_id`` (a button's value: lifted from elsewhere, or made up) is the clicked thread's run."""
        try:
            home = (await self.engine.run_record(run_id)).thread_id
        except EngineError:
            return False
        return home == thread_key(channel, str(thread_ts))

    async def _decide(self, action_id: str, token: str, user: str, channel: str, thread_ts: str | None,
                      state: dict[str, Any], receipt: Receipt) -> bool:
        """Whether the decision was recorded (queued for a worker, which closes the card)."""
        try:
            ticket = await self.engine.ticket(token)  # the one read a click needs before it is claimed
        except NotPending:
            await self._ended(token, channel, user, thread_ts, receipt)
            return False
        verdict = await self.access.may_use(user, channel, direct=channel.startswith("D"))
        if verdict.allowed and (ticket.thread_id != thread_key(channel, str(thread_ts))  # a token lifted elsewhere
                                or not kit.carries(receipt.blocks, token)):  # or onto another message
            log.warning("%s by %s in %s/%s with a token of thread %s refused", action_id, user, channel, thread_ts,
                        ticket.thread_id)
            verdict = _MISPLACED
        if verdict.allowed:
            answer, verdict = await self._decision(action_id, ticket, user, channel, thread_ts, state)
            if not verdict.allowed and await self._ended(token, channel, user, thread_ts, receipt, only=True):
                return False
        if not verdict.allowed:
            await self._refuse(channel, user, verdict, thread_ts)
            return False
        await receipt.hold()  # a receipt on its way lands before the worker's close
        await self.dispatch(answer.model_copy(update={"response_url": receipt.url,
                                                      "card": {"blocks": receipt.blocks, "text": receipt.text}}))
        receipt.follow(self.meta, token)  # queued: a receipt if no worker closes it soon
        return True

    async def _ended(self, token: str, channel: str, user: str, thread_ts: str | None, receipt: Receipt, *,
                     only: bool = False) -> bool:
        """Tell ``user`` how the card ended (``only``: if it has, decided or claimed): what is true, said first."""
        card = await self.meta.get(CARD, token)
        decided = card.get("decided", "")
        lang = card.get("lang") or language_of(kit.shown({"blocks": receipt.blocks}), self.access.config.language)
        holder = None if decided or not only else await self.engine.deps.store.locks.claimed_by(token)
        if only and not decided and not holder:
            return False
        if decided and card.get("summary"):  # a receipt shown meanwhile gives way to how it ended
            receipt.restore = kit.decided_card(card["summary"], decided)
        text = say(lang, "request_expired") if decided.startswith(":hourglass:") or holder == "expiry" else \
            say(lang, "handled", how=f" ({decided})") if decided else \
            say(lang, "handled_by", by=f"<@{holder}>") if holder else say(lang, "not_pending")  # nothing on record
        if not decided and not holder:
            receipt.unknown(say(lang, "card_unknown"))
        await self.outbox.tell(channel, user, text, thread_ts)
        return True

    async def _decision(self, action_id: str, ticket: Ticket, user: str, channel: str, thread_ts: str | None,
                        state: dict[str, Any]) -> tuple[Answer, Verdict]:
        """What the click means, and whether this person may make it."""
        pending = ticket.pending
        env = pending.environment
        answer = Answer(ticket=ticket, decision="decline", user=user, channel=channel, thread_ts=thread_ts)
        if action_id == "opspilot_submit":
            values = {k: redact(v) for k, v in kit.form_values(state).items()}
            return answer.model_copy(update={"decision": "submit", "values": values}), Verdict(True)
        if action_id == "opspilot_confirm":
            home = channel_of(ticket.thread_id)  # the card's channel (the click's was checked to match it)
            verdict = self.access.may_change_in(home, direct=home.startswith("D"))
            if verdict.allowed:
                verdict = await self.access.may_confirm(user, pending.call.name, env, ticket.requester)
            return answer.model_copy(update={"decision": "confirm"}), verdict
        verdict = Verdict(True) if user == ticket.requester else \
            await self.access.may_confirm(user, pending.call.name, env, None)
        name = await self.people.name(user)  # the model reads this: a name, not an id
        return answer.model_copy(update={"reason": f"declined in Slack by {name}"}), verdict

