"""Engine events → Slack: the live progress message, question cards and their final state, the answer.

Subscribed to the engine's event bus, so it runs in its own task per run, never while a run holds its
thread's lease. It never calls Slack itself: each message's new state goes to the durable outbox, which
delivers it (coalescing edits, retrying until Slack accepts). Rendering is driven by events alone, so a
run resumed on another instance keeps editing the same progress message (its state lives in the store).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.agent.events import Event, PendingView, ToolResultEvent
from bot.agent.fallback import Fallback
from bot.slack.followups.buttons import recheck_button
from bot.slack.inbound.access import AccessPolicy
from bot.slack.inbound.receipt import Receipt
from bot.slack.outbound import blocks as kit
from bot.slack.outbound import change_card
from bot.slack.outbound.audit import audit_line, ran_a_change
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.outputs import fallback_answer, output
from bot.slack.outbound.people import People
from bot.slack.outbound.progress_words import card_ending, clip, model_note, progress_text
from bot.slack.outbound.thread_meta import CARD, RUN, THREAD
from bot.slack.outbound.words import headline, language_of, say
from bot.slack.rollbacks.offer import offer, remember
from core.messages import DECLINED
from core.stops import STOP_WORDING
from state.store import MetaStore, Reports

log = logging.getLogger(__name__)
_who = kit.who

_PROGRESS = frozenset({"model_step", "tool_call", "tool_result"})
_SHOWS = _PROGRESS | {"loop_interrupt", "run_stalled", "run_finished"}
"""Events whose handling shows the run's progress as it then stands (a pause, a stall and the end with their last
word): progress followed by one of them can leave its showing to it."""
_TONE_ICONS = {"done": ":white_check_mark:", "stopped": ":no_entry_sign:", "expired": ":hourglass:",
               "warning": ":warning:"}


def _seg_now(state: dict[str, Any]) -> int:
    """The stream segment the next piece of work shows in (a new one once the last was stopped)."""
    return int(state.get("seg", 0)) + (1 if state.get("closed") else 0)


def _close_lines(state: dict[str, Any], lang: str) -> bool:
    """A call still shown running when its run stops or ends was cut off by a restart: its step was thought
    again (read-only calls are saved with their results), so no result for it will ever come."""
    for line in state["lines"]:
        if line["status"] == "running":
            line["status"], line["detail"] = "cancelled", say(lang, "interrupted")
    return True


def _line(state: dict[str, Any], call_id: str) -> dict[str, Any] | None:
    return next((ln for ln in state["lines"] if ln["call_id"] == call_id), None)


class Renderer:
    def __init__(self, *, outbox: SlackOutbox, meta: MetaStore, reports: Reports, model_note: str,
                 access: AccessPolicy, people: People, language: str = "auto", progress: str = "update") -> None:
        self.access = access
        self.people = people
        self.language = language
        self.progress = progress
        self.outbox = outbox
        self.meta = meta
        self.reports = reports
        self.model_note = model_note  # the label of a scripted model standing in ('' for a real one): said per thread
        self._runs: dict[str, dict[str, Any]] = {}  # progress state of runs working on this instance
        self.rechecks = 0
        self.rollbacks = False
        """Offer "Roll back to <previous release>" under an answer whose verdict is yes (rollback_service exists)."""
        """Offer "Re-check in N min" under an answer that reports a change (0: off, where follow-ups do not exist)."""
        self.shown: Callable[[str, str], Awaitable[None]] | None = None
        """Tells the store a run's pause or end is in the outbox (see ``state.store.UNSHOWN``)."""

    async def __call__(self, event: Event, following: Event | None = None) -> None:
        """``following``: the run's next event, when it is queued already. Progress alone (a step, a call, a result)
        followed by an event that shows the progress anyway is applied and left for that one to show: one state
        saved and one message edit queued per burst, not one per event (a step's calls and results come out
        together; the answer's step just before the end)."""
        if event.type == "run_started":
            await self._open_progress(event.run_id, event.thread_id, language_of(event.text, self.language),
                                      event.user_id)
            return
        if event.type == "call_decided":
            await self.close_card(event.token, functools.partial(card_ending, event))
            state = await self._state(event.run_id, event.thread_id)
            if state is None:
                return
            if state.get("mode") == "stream":  # the paused stretch will say who answered once the run moves on
                state["answers"] = [*state.get("answers", []), [event.decision, event.by or ""]]
            line = _line(state, event.call_id) if event.decision in ("confirmed", "submitted") else None
            if line is not None:  # it runs now: no longer "waiting" while it does, nor the header "Waiting for you"
                line["status"], line["seg"] = "running", _seg_now(state)  # a stream goes on below the card
                if not any(other.get("status") == "waiting" for other in state.get("lines") or []):
                    state["header"] = f":mag: {say(str(state.get('lang') or 'en'), 'working')}"
                await self._show(event.run_id, state)
            elif state.get("mode") == "stream":
                await self.outbox.save_state(state["channel"], state["thread_ts"], event.run_id, _saved(state))
            return
        state = await self._state(event.run_id, event.thread_id)
        if state is None:
            return  # not a Slack thread (e.g. the terminal chat sharing the engine)
        leave = False  # a run that pauses or ends may continue on any instance: its state lives in the store
        lang = str(state.get("lang") or "en")
        if event.type != "run_stalled":  # it moves again: Resume has done its job, and the stall's note goes
            state["resumable"], state["note"] = False, state.pop("model_note", state.get("note"))
        if event.type == "model_step":
            state["step"] = event.step
            if event.asked_for_tools and event.text.strip() and not state.get("plan"):
                state["plan"] = event.text.strip().splitlines()[0][:200]  # what the model said it would do
        elif event.type == "tool_call":
            # The call's arguments are data: each value in a code span (cut short, never cut open).
            detail = ", ".join(f"{k}=`{clip(str(v), 40)}`" for k, v in list(event.arguments.items())[:3])
            line = _line(state, event.call_id)  # a confirmed call already has its line (it was waiting)
            target = "/".join(str(event.arguments[k]) for k in ("service_id", "environment")
                              if event.arguments.get(k))
            if line is None:
                state["lines"].append({"call_id": event.call_id, "tool": event.tool, "status": "running",
                                       "detail": detail, "target": target, "seg": _seg_now(state)})
            else:
                line.update(status="running", detail=detail, target=target, seg=_seg_now(state))
        elif event.type == "tool_result":
            if self.rollbacks and isinstance(event, ToolResultEvent):
                remember(state, event)  # for a "Roll back to …" offer under the answer
            line = _line(state, event.call_id)
            if line is not None:  # what it found, in the thread's words (the facts are the tool's)
                # A person said no: not a failure ("declined: not run"); a change that may have run: not "failed".
                line["status"] = {DECLINED: "declined", "outcome_unknown": "unknown"}.get(event.error_code or "",
                                                                                          event.status)
                line["detail"] = output(event.status, event.error_code, event.data, lang, event.summary)
        elif event.type == "loop_interrupt":
            state["header"], leave = f":raised_hand: {say(lang, 'waiting')}", True
            state["requester"] = event.requester or state.get("requester") or ""  # who asked for it, on its cards
            for pending in event.pending:
                line = _line(state, pending.call_id)
                if line is not None:
                    line["status"], line["detail"] = "waiting", kit.gate(pending.reason, pending.payload, lang) \
                        if pending.interrupt_type == "confirm_risky" else kit.form_ask(pending.payload, lang)
        elif event.type == "run_stalled":
            state.setdefault("model_note", state.get("note") or "")  # (which model: said again once it moves)
            state.update(header=f":warning: {say(lang, 'interrupted')}", stoppable=False, resumable=True,
                         note=say(lang, "interrupted_note"))
            leave = _close_lines(state, lang)
        elif event.type == "run_finished":
            _close_lines(state, lang)
            wording = STOP_WORDING[event.stop_reason]
            state["header"] = f"{_TONE_ICONS[wording.tone]} {headline(lang, event.stop_reason)}"
            if event.stop_reason == "cancelled" and event.by:
                state["header"] = f":no_entry_sign: {say(lang, 'stopped_by', by=_who(event.by), at=kit.hhmm())}"
            state["stoppable"], leave = False, True
        if event.type == "run_finished":
            await self._finish(state, event.run_id, event.answer, stopped_by=event.by, composed=event.fallback,
                               changed=event.may_have_changed)
        elif event.type == "loop_interrupt":
            await self._show(event.run_id, state, end=_End(md=f":raised_hand: {say(lang, 'waiting_below')}"))
            for group in _same_questions(event.pending):
                await self._post_card(state, event.run_id, group[0], siblings=group[1:])
        elif event.type == "run_stalled":
            resume = kit.button(say(lang, "resume"), "opspilot_resume", event.run_id, style="primary")
            await self._show(event.run_id, state, end=_End(md=f"{state['header']}\n\n{state['note']}", blocks=[
                {"type": "actions", "block_id": "opspilot_run", "elements": [resume]}]))
        # A stream's paused stretch is closed out by the first plain showing after the pause: there, progress leaves
        # its showing only to more progress.
        elif following is None or following.type not in (_PROGRESS if state.get("mode") == "stream" else _SHOWS):
            await self._show(event.run_id, state)
        if leave:
            self._runs.pop(event.run_id, None)
            if self.shown is not None:  # its answer or cards are in the outbox now: nothing left to catch up on
                await self.shown(event.run_id, event.thread_id)

    async def progress_of(self, run_id: str, thread_id: str, lang: str, user_id: str | None,
                          calls: Sequence[tuple[str, str, str]] = ()) -> bool:
        """Make sure the run has a progress state (one shown late, from its record, may never have had one), with
        ``calls`` (call id, tool, status: from its trace) as its lines; False where the thread is not Slack's."""
        if await self._state(run_id, thread_id) is None:
            await self._open_progress(run_id, thread_id, lang, user_id)
            state = await self._state(run_id, thread_id)
            if state is not None:
                state["lines"] = [{"call_id": c, "tool": tool, "status": status, "detail": "", "target": "",
                                   "seg": 0} for c, tool, status in calls]
        return await self._state(run_id, thread_id) is not None

    async def close_card(self, token: str, ending: Callable[[str], str]) -> None:
        """Bring a question's card to its final state (``ending`` in the card's language), once, with no
        buttons left."""
        card = await self.meta.get(CARD, token)
        if card.get("decided"):
            return
        outcome = ending(card.get("lang", "en"))
        await self.meta.put(CARD, token, {"decided": outcome})  # even before the card exists: see _post_card
        if not card.get("channel"):
            return
        if (receipt := Receipt.of(token)) is not None:
            await receipt.hold()  # the click's receipt on its way (the store was slow) lands before the outcome
        await self.outbox.message(f"card:{token}", card["channel"], card.get("thread_ts"), outcome,
                                  kit.decided_card(card.get("summary", ""), outcome),
                                  response_url=card.get("response_url", ""))

    async def _open_progress(self, run_id: str, thread_id: str, lang: str, user_id: str | None = None) -> None:
        where = await self.meta.get(THREAD, thread_id)
        if not where:
            return
        if where.get("lang"):
            lang = where["lang"]  # a thread keeps the language of its first question
        else:
            await self.meta.put(THREAD, thread_id, {"lang": lang})
        state: dict[str, Any] = {"run_id": run_id, "header": f":mag: {say(lang, 'working')}", "step": 0,
                                 "lines": [], "stoppable": True, "note": model_note(self.model_note, lang),
                                 "lang": lang,
                                 "channel": where["channel"], "thread_ts": where["thread_ts"],
                                 "requester": user_id or ""}
        if self.progress != "update" and kit.is_user(user_id or ""):  # Slack streams to a person, not a bot
            state.update(mode="stream", recipient=user_id, seg=0, closed=False)
        self._runs[run_id] = state
        await self._show(run_id, state)
        self._status(state, say(lang, "status_working"))

    async def _state(self, run_id: str, thread_id: str) -> dict[str, Any] | None:
        if run_id in self._runs:
            return self._runs[run_id]
        where = await self.meta.get(THREAD, thread_id)  # the run was started (or paused) elsewhere
        if not where.get("channel"):
            return None  # not a Slack thread (e.g. the terminal chat sharing the engine)
        saved = await self.outbox.shown_state(where["channel"], where["thread_ts"], run_id) \
            or (await self.meta.get(RUN, run_id)).get("progress")  # saved before states moved beside the outbox
        if not saved:
            return None
        state: dict[str, Any] = json.loads(saved)
        self._runs[run_id] = state
        return state

    def _status(self, state: dict[str, Any], text: str) -> None:
        if state.get("mode") == "stream":
            self.outbox.status(state["channel"], state["thread_ts"], text)

    async def _show(self, run_id: str, state: dict[str, Any], end: _End | None = None) -> None:
        """Save the state (any instance may render the next event) and queue the message's new state.

        Streamed progress is one stream per stretch of work: a pause or the end stops it (``end``: what it
        stops with), and work after a pause streams on in a new message below the question's card."""
        streamed = state.get("mode") == "stream"
        if streamed and state.get("closed"):  # moving again after a pause, or ending after one it never left (a
            await self._close_out(run_id, state, ended=end is not None)  # stall): its end goes in a stretch below
            state["seg"], state["closed"] = state["seg"] + 1, False
            if end is None:
                self._status(state, say(str(state.get("lang") or "en"), "status_working"))
        if streamed and end is not None:
            state["closed"] = True
            self._status(state, "")
        saved = (run_id, _saved(state))  # with the message's new state: any instance may render the next event
        if not streamed:
            await self.outbox.message(f"progress:{run_id}", state["channel"], state["thread_ts"],
                                      progress_text(state), kit.progress_blocks(state), settled=end is not None,
                                      state=saved)
            return
        seg, lang = state["seg"], str(state.get("lang") or "en")
        # A stopped stretch offers no Stop, even as the plain message a stream may fall back to.
        shown = {**state, "lines": [ln for ln in state["lines"] if ln.get("seg", 0) == seg],
                 "stoppable": state.get("stoppable") and not state["closed"]}
        # The Stop button goes in a message of its own under the stream, which the outbox deletes once the
        # stream stops: a stream cannot take back a button it showed.
        stop = kit.button(say(lang, "stop"), "opspilot_stop", run_id, style="danger")
        end = end or _End()
        await self.outbox.stream(
            _stream_key(run_id, seg), state["channel"], state["thread_ts"],
            recipient=state.get("recipient"), text=progress_text(shown), blocks=kit.progress_blocks(shown),
            tasks=[kit.task(ln) for ln in shown["lines"]], plan=str(state.get("plan") or ""),
            control=(say(lang, "stop_note"), [{"type": "actions", "block_id": "opspilot_run", "elements": [stop]}]),
            final=state["closed"], final_md=end.md, final_blocks=end.blocks, then=end.then, state=saved)

    async def _close_out(self, run_id: str, state: dict[str, Any], ended: bool = False) -> None:
        """The stretch that stopped at a pause (or a stall), now that the run moved on: edited (chat.update on
        the stopped stream) to say who answered, so it no longer reads "Waiting for a person"."""
        lang, seg = str(state.get("lang") or "en"), state["seg"]
        answers: list[list[str]] = state.pop("answers", [])
        people = say(lang, "comma").join(dict.fromkeys(_who(by) for _, by in answers if kit.is_user(by)))
        if not answers:
            header = say(lang, "ended_below" if ended else "resumed_continued")
        elif any(decision == "cancelled" for decision, _ in answers) and people:
            header = say(lang, "stopped_continued", by=people)
        elif people:
            header = say(lang, "answered_continued", by=people)
        else:
            header = say(lang, "expired_continued")
        past = {**state, "header": f":arrow_down: {header}", "stoppable": False, "resumable": False,
                "lines": [ln for ln in state["lines"] if ln.get("seg", 0) == seg]}
        await self.outbox.close_stream(_stream_key(run_id, seg), state["channel"], state["thread_ts"],
                                       progress_text(past), kit.progress_blocks(past))

    async def _post_card(self, state: dict[str, Any], run_id: str, pending: PendingView,
                         siblings: Sequence[PendingView] = ()) -> None:
        """One card per question; calls of one step asking for the same fields share one form (``siblings``
        are answered with it)."""
        lang = str(state.get("lang") or "en")
        if pending.interrupt_type == "confirm_risky":
            who = await self.access.who_may_confirm(
                self.people, tool=pending.tool, environment=pending.environment,
                requester=state.get("requester"), channel=state["channel"], lang=lang)
            card = change_card.confirm_card(pending.token, pending.reason, pending.payload, lang, who=who,
                                    confirmable=self.access.confirmable(pending.tool, pending.environment,
                                                                        state.get("requester")))
            fallback = f"{say(lang, 'confirmation_needed')} — {kit.gate(pending.reason, pending.payload, lang)}"
        else:
            subject = kit.form_subject([pending.tool, *(s.tool for s in siblings)], pending.arguments, lang)
            fallback = f"{say(lang, 'need_more')} — {kit.form_ask(pending.payload, lang)}"
            card = kit.params_form(pending.token, pending.reason, pending.payload, subject=subject, lang=lang)
        tools = [pending.tool, *(s.tool for s in siblings)]
        summary = change_card.card_summary(pending.interrupt_type, pending.reason, pending.payload, lang, tools,
                                   pending.arguments)
        for sibling in siblings:  # no card of its own: closing it is a no-op, the shared form shows the answer
            await self.meta.put(CARD, sibling.token, {"run_id": run_id, "call_id": sibling.call_id,
                                                      "summary": summary, "primary": pending.token, "lang": lang})
        await self.meta.put(CARD, pending.token, {
            "channel": state["channel"], "thread_ts": state["thread_ts"], "run_id": run_id,
            "call_id": pending.call_id, "summary": summary, "siblings": ",".join(s.token for s in siblings),
            "lang": lang})
        await self.outbox.message(f"card:{pending.token}", state["channel"], state["thread_ts"], fallback, card)
        decided = (await self.meta.get(CARD, pending.token)).get("decided")
        if decided:  # answered elsewhere before the card was recorded: show it closed, never live
            await self.outbox.message(f"card:{pending.token}", state["channel"], state["thread_ts"], decided,
                                      kit.decided_card(summary, decided))

    async def _finish(self, state: dict[str, Any], run_id: str, answer: str, stopped_by: str | None = None,
                      composed: Fallback | None = None, changed: bool = True) -> None:
        """The progress's final state and the answer: as separate messages, or streamed at the stream's end
        (posted as messages all the same if the stream had to fall back by then)."""
        lang = str(state.get("lang") or "en")
        text = kit.escape(kit.unlinked(answer))  # the model's words: no mention, no disguised link
        if composed is not None:  # ours, not the model's: said in the thread's words, with who pressed Stop
            text = fallback_answer(composed, lang, _who(stopped_by) if stopped_by else "")
        shown = text
        # Only a run that called a tool that changes things (by its own trace) has changes to list; most only read,
        # and skip the audit stream's read (its shard's last 2,000 entries).
        changes = await self.reports.read_audit(200, run_id=run_id) if changed else []
        if changes:
            text += f"\n\n*{say(lang, 'audit')}*\n" + "\n".join(audit_line(a, lang) for a in reversed(changes))
        # An answer whose change ran offers to look again once it has had time to show (a follow-up).
        after = [recheck_button(run_id, lang, self.rechecks)] if ran_a_change(changes) and self.rechecks else []
        if self.rollbacks and not changes and (button := offer(state, run_id, lang)) is not None:
            after.append(button)  # never under an answer whose run already changed something
        chunks = kit.split_answer(text, lang)
        if len(chunks[-1]) < kit.MAX_BLOCKS - len(after):
            chunks[-1] = [*chunks[-1], kit.feedback(run_id, lang), *after]
        posts = [(f"answer:{run_id}:{i}", kit.fallback_text(shown), chunk) for i, chunk in enumerate(chunks)]
        markdown = kit.to_markdown(text)
        if state.get("mode") == "stream" and len(markdown) <= kit.STREAM_TEXT:
            note = [kit.context(state["note"])] if state.get("note") else []
            await self._show(run_id, state, end=_End(md=markdown, blocks=[kit.feedback(run_id, lang), *after, *note],
                                                      then=posts))
            return
        await self._show(run_id, state, end=_End(md=state["header"]))
        for key, fallback, blocks in posts:
            await self.outbox.message(key, state["channel"], state["thread_ts"], fallback, blocks)


def _saved(state: dict[str, Any]) -> str:
    return json.dumps(state, ensure_ascii=False)


def _stream_key(run_id: str, seg: int) -> str:
    return f"progress:{run_id}" + (f":{seg}" if seg else "")


@dataclass(frozen=True)
class _End:
    """How a stream stops: the markdown it ends with, blocks under it, and the messages to post instead if it
    had to fall back to a plain message."""

    md: str = ""
    blocks: list[kit.Block] = field(default_factory=list)
    then: list[tuple[str, str, list[kit.Block]]] = field(default_factory=list)


def _same_questions(pending: Sequence[PendingView]) -> list[list[PendingView]]:
    """Forms of one step asking for the same fields, grouped (asked once); every other question alone."""
    groups: dict[tuple[str, ...], list[PendingView]] = {}
    out: list[list[PendingView]] = []
    for p in pending:
        if p.interrupt_type != "params_required":
            out.append([p])
            continue
        fields = tuple(sorted(str(f.get("name")) for f in p.payload.get("fields", [])))
        if fields in groups:
            groups[fields].append(p)
        else:
            groups[fields] = [p]
            out.append(groups[fields])
    return out
