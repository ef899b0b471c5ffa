"""Follow-ups: "re-check in 10 minutes". A person's run may schedule one (the ``schedule_followup`` tool, or the
Re-check button under an answer whose change ran); when it is due, a new turn runs in the same thread on
behalf of whoever asked, reading the thread's history, so it can compare with what was found before.

Limits, each refused with a reason the model (or the person) reads: 1–240 minutes ahead, at most
:data:`PER_THREAD` pending per thread, only in a Slack thread, and only from a run a person started — a follow-up,
a scheduled check or an alert cannot schedule more (no chain of follow-ups that nobody asked for).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from bot import when
from state.keys import shard_of
from state.meta_store import one_at_a_time
from state.store import MetaStore
from state.timer_store import Timer, TimerStore, new_timer_id
from tools import ToolContext, tool
from tools.registry import ToolSpec
from tools.tool_errors import ToolError

log = logging.getLogger(__name__)

MIN_MINUTES, MAX_MINUTES, PER_THREAD = 1, 240, 3
TURN_WAIT_S, TURN_HOLD_S = 10.0, 30
"""How long a follow-up waits for another of its person's to be counted and added; the turn's hold, should its
process die holding it."""
QUESTION_CHARS = 500


class Refused(Exception):
    """A follow-up not scheduled: ``code`` for the model, the message for anyone."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def slack_thread(thread_id: str) -> tuple[str, str] | None:
    """(channel, thread_ts) of an engine thread that is a Slack thread (``slack:<channel>:<ts>``)."""
    kind, _, rest = thread_id.partition(":")
    channel, _, ts = rest.partition(":")
    return (channel, ts) if kind == "slack" and channel and ts else None


def keyed_id(thread_id: str, key: str) -> str:
    """The id of the follow-up ``key`` names in ``thread_id`` (the same key, the same follow-up)."""
    return f"{shard_of(thread_id)}.f{hashlib.sha256(key.encode()).hexdigest()[:16]}"


Listener = Callable[[Timer], Awaitable[None]]


@dataclass
class Followups:
    timers: TimerStore
    clock: Callable[[], float] = time.time
    listeners: list[Listener] = field(default_factory=list)
    """Told of each new follow-up (the Slack front announces it in its thread, with Cancel)."""
    per_person: int = 0
    """At most this many pending per person across threads (``slack.limits.followups_per_person``; 0: none)."""
    meta: MetaStore | None = None
    """Where a person's follow-ups are counted and added one at a time (their timers span shards)."""

    async def schedule(self, *, thread_id: str, owner: str | None, after_minutes: int, question: str,
                       source: str, unattended: bool = False, key: str | None = None) -> tuple[Timer, bool]:
        """Keep a follow-up: it, and whether it is new (``key`` makes a repeat — a retried tool call, a second
        click — the same one). Raises :class:`Refused`."""
        where = slack_thread(thread_id)
        if where is None:
            raise Refused("not_available", "Follow-ups exist only in Slack threads.")
        if unattended or not owner:
            raise Refused("unattended", "No person asked for this run (a follow-up, a scheduled check or an alert "
                                        "started it), so it cannot schedule a follow-up. Tell the people in the "
                                        "thread what to re-check, and when.")
        if not MIN_MINUTES <= after_minutes <= MAX_MINUTES:
            raise Refused("after_minutes_out_of_range",
                          f"after_minutes must be between {MIN_MINUTES} and {MAX_MINUTES}; {after_minutes} was "
                          "asked. Nothing was scheduled.")
        question = " ".join(question.split())[:QUESTION_CHARS]
        if not question:
            raise Refused("validation_error", "question is empty: say what the follow-up should check.")
        now = self.clock()
        timer_id = keyed_id(thread_id, key) if key else new_timer_id(thread_id)
        timer = Timer(id=timer_id, kind="followup", group=thread_id, channel=where[0], thread_ts=where[1],
                      owner=owner, question=question, created_at=now, due=when.once(after_minutes * 60, now),
                      source=source)
        if self.per_person and self.meta is not None:
            async with one_at_a_time(self.meta, f"followup-cap:{owner}", timer_id, hold_s=TURN_HOLD_S,
                                     wait_s=TURN_WAIT_S) as turn:
                if not turn:
                    raise Refused("busy", "Another follow-up of this person's is being scheduled right now. Nothing "
                                          "was scheduled: try again in a moment.")
                added = await self._add(timer, owner, repeat=bool(key))
        else:
            added = await self._add(timer, owner, repeat=bool(key))
        if added == "full":
            pending = await self.timers.pending(thread_id)
            times = ", ".join(when.local(t.due) for t in pending)
            raise Refused("too_many_followups",
                          f"This thread already has {len(pending)} follow-ups pending (at {times}); at most "
                          f"{PER_THREAD} are allowed. Nothing was scheduled: cancel one first, or fold this "
                          "question into one of them.")
        kept = await self.timers.get(timer_id) if added == "exists" else timer
        if kept is None:  # it existed, and ran or was cancelled since: nothing pending to announce
            return timer, False
        # Announced again when it existed already: an announcement lost with its process (or a Redis blip) after
        # the timer was kept comes with the next ask — announcing is idempotent (keyed by the timer).
        for listener in self.listeners:
            try:
                await listener(kept)
            except Exception:  # the follow-up is kept either way; only its announcement is missing
                log.exception("follow-up %s not announced", timer.id)
        return kept, added != "exists"


    async def _add(self, timer: Timer, owner: str, repeat: bool) -> str:
        """Keep ``timer`` within the person's and the thread's caps: "added", "exists" or "full"."""
        if self.per_person and not (repeat and await self.timers.get(timer.id)):  # (a repeat is not a new one)
            mine = [t for t in await self.timers.every() if t.kind == "followup" and t.owner == owner]
            if len(mine) >= self.per_person:
                raise Refused("too_many_followups_for_person",
                              f"{owner} already has {len(mine)} follow-ups pending across threads; at most "
                              f"{self.per_person} are allowed per person. Nothing was scheduled: cancel one first.")
        return await self.timers.add(timer, limit=PER_THREAD)


class FollowupArgs(BaseModel):
    after_minutes: int = Field(description=f"how many minutes from now ({MIN_MINUTES}–{MAX_MINUTES})",
                               json_schema_extra={"minimum": MIN_MINUTES, "maximum": MAX_MINUTES})
    question: str = Field(description="what to check then, e.g. 'is payments' error rate still below 1% after "
                                      "the restart?'")


def followup_tool(followups: Followups) -> ToolSpec:
    @tool(name="schedule_followup", timeout_s=10.0)
    async def schedule_followup(args: FollowupArgs, ctx: ToolContext) -> dict[str, Any]:
        """Schedule a follow-up in this Slack thread: after `after_minutes` (1-240), a new turn runs here with
        `question` and this thread's history, so you can compare with what you found now (e.g. after a
        restart: is it holding?). Use it when the person asks to re-check later, or offers it. At most 3
        pending per thread. It changes nothing itself; a change in the follow-up waits for a person."""
        try:
            timer, _ = await followups.schedule(thread_id=ctx.thread_id, owner=ctx.user_id,
                                             after_minutes=args.after_minutes, question=args.question,
                                             source="model", unattended=ctx.unattended,
                                             key=f"{ctx.run_id}:{ctx.call_id}")
        except Refused as exc:
            raise ToolError(str(exc), code=exc.code) from exc
        return {"followup_id": timer.id, "due_at_utc": when.local(timer.due), "question": timer.question,
                "requested_by": timer.owner, "note": "announced in the thread, with a Cancel button"}

    return schedule_followup
