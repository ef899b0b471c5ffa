"""Engine events → Slack: the live progress message, question cards and their final state, the answer.

Subscribed to the engine's event bus, so it runs in its own task per run, never while a run holds its
thread's lease. Rendering is driven by events alone, so a run resumed on another instance keeps editing
the same progress message (its location and state live in the metadata store).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from bot.agent.events import CallDecided, Event, PendingView
from bot.config import SlackConfig
from bot.slack import blocks as kit
from bot.slack.meta import CARD, RUN, THREAD
from bot.slack.poster import Poster
from bot.slack.progress import ProgressMessage
from core.stops import STOP_WORDING
from state.store import MetaStore, Reports

log = logging.getLogger(__name__)

_TONE_ICONS = {"done": ":white_check_mark:", "stopped": ":no_entry_sign:", "expired": ":hourglass:",
               "warning": ":warning:"}


def card_ending(event: CallDecided) -> str:
    """A question card's final words: who decided what, and when."""
    by, at = f"<@{event.by}>", kit.hhmm(event.at)
    return {
        "confirmed": f":white_check_mark: Confirmed by {by} at {at}",
        "submitted": f":memo: Submitted by {by} at {at}",
        "declined": f":x: Declined by {by} at {at}",
        "replied": ":speech_balloon: Answered in the thread instead",
        "expired": ":hourglass: Expired — nothing was run",
        "cancelled": ":no_entry_sign: Cancelled",
    }[event.decision]


class Renderer:
    def __init__(self, *, poster: Poster, meta: MetaStore, reports: Reports, config: SlackConfig,
                 model_note: str) -> None:
        self.poster = poster
        self.meta = meta
        self.reports = reports
        self.config = config
        self.model_note = model_note
        self._progress: dict[str, ProgressMessage] = {}

    async def __call__(self, event: Event) -> None:
        if event.type == "run_started":
            await self._open_progress(event.run_id, event.thread_id)
            return
        if event.type == "call_decided":
            await self.close_card(event.token, card_ending(event))
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
        elif event.type == "loop_interrupt":
            progress.state["header"] = ":raised_hand: Waiting for you"
            for pending in event.pending:
                line = progress.line(pending.call_id)
                if line is not None:
                    line["status"], line["detail"] = "waiting", pending.reason
                await self._post_card(progress, event.run_id, pending)
            # Paused: the answer may reach any instance, so the state lives in the store from here on.
            await self._close(progress)
            return
        elif event.type == "run_stalled":
            progress.state.update(header=":warning: Interrupted by a restart", stoppable=False, resumable=True,
                                  note="The worker running this stopped. Finished steps are kept; a change that "
                                       "was running is reported as outcome unknown, never re-run.")
            await self._close(progress)
            return
        elif event.type == "run_finished":
            wording = STOP_WORDING[event.stop_reason]
            progress.state["header"] = f"{_TONE_ICONS[wording.tone]} {wording.headline}"
            progress.state["stoppable"] = False
            await self._close(progress)
            await self._post_answer(progress, event.run_id, event.answer)
            return
        progress.changed()

    async def drain(self) -> None:
        """Finish edits in flight (tests, graceful shutdown)."""
        for progress in list(self._progress.values()):
            if progress._task is not None and not progress._task.done():
                await progress.close()

    async def close_card(self, token: str, outcome: str) -> None:
        """Edit a question's card to its final state, once, with no buttons left."""
        card = await self.meta.get(CARD, token)
        if not card.get("ts") or card.get("decided"):
            return
        await self.meta.put(CARD, token, {"decided": outcome})
        blocks = kit.decided_card(card.get("summary", ""), outcome)
        await self.poster.update(card["channel"], card["ts"], outcome, blocks)

    async def _close(self, progress: ProgressMessage) -> None:
        await progress.close()
        self._progress.pop(progress.run_id, None)

    async def _open_progress(self, run_id: str, thread_id: str) -> None:
        where = await self.meta.get(THREAD, thread_id)
        if not where:
            return
        state: dict[str, Any] = {"run_id": run_id, "header": ":mag: Working on it…", "step": 0, "lines": [],
                                 "stoppable": True, "note": self.model_note, "channel": where["channel"],
                                 "thread_ts": where["thread_ts"]}
        posted = await self.poster.post(where["channel"], "Working on it…", kit.progress_blocks(state),
                                        thread_ts=where["thread_ts"])
        if posted is None:
            return
        await self.meta.put(RUN, run_id, {"channel": where["channel"], "ts": str(posted["ts"]),
                                          "progress": json.dumps(state, ensure_ascii=False)})
        self._progress[run_id] = self._make_progress(where["channel"], str(posted["ts"]), state)

    def _make_progress(self, channel: str, ts: str, state: dict[str, Any]) -> ProgressMessage:
        return ProgressMessage(client=self.poster.client, meta=self.meta, metrics=self.poster.metrics,
                               channel=channel, ts=ts, state=state, interval_s=self.config.progress_interval_s,
                               pacer=self.poster.pacer)

    async def _progress_for(self, run_id: str) -> ProgressMessage | None:
        if run_id in self._progress:
            return self._progress[run_id]
        meta = await self.meta.get(RUN, run_id)  # the run was started (or paused) elsewhere
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
        posted = await self.poster.post(progress.channel, pending.reason, card, thread_ts=progress.state["thread_ts"])
        if posted is None:
            return
        summary = kit.card_summary(pending.interrupt_type, pending.reason, pending.payload)
        await self.meta.put(CARD, pending.token, {
            "channel": progress.channel, "ts": str(posted["ts"]), "run_id": run_id, "call_id": pending.call_id,
            "summary": summary, "decided": ""})

    async def _post_answer(self, progress: ProgressMessage, run_id: str, answer: str) -> None:
        text = answer
        changes = [a for a in await self.reports.read_audit(200) if a.get("run_id") == run_id]
        if changes:
            text += "\n\n*Audit*\n" + "\n".join(
                f"• `{a['tool']}` {a['arguments']} — requested by <@{a['requested_by']}>"
                + (f", approved by <@{a['approved_by']}>" if a.get("approved_by") else "")
                + f" — {a['status']}{' (' + a['error_code'] + ')' if a.get('error_code') else ''}"
                for a in reversed(changes))
        for chunk in kit.split_answer(text):
            await self.poster.post(progress.channel, kit.fallback_text(answer), chunk,
                                   thread_ts=progress.state["thread_ts"])
