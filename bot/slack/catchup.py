"""What an instance that died left undone in Slack, done by another.

Two duties, both after a kill: a run that paused or ended while nobody showed it (its instance died between the
run's last write and the outbox) is shown from its record — the store keeps such runs in its ``unshown`` index,
written in the same script as the pause or the end; and a run whose worker died while its step only read data is
carried on by itself (bounded, said in the thread) instead of waiting for a person's Resume. A step with a change
in flight still waits for a person: its outcome is unknown and it is never re-run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from bot.agent.engine import Engine
from bot.agent.events import Event, LoopInterrupt, RunFinished, RunStalled
from bot.agent.fallback import Fallback
from bot.agent.outcome import pending_view
from bot.agent.periodic import Periodic, claimed
from bot.slack.inbound.work_items import AUTOMATIC, RunButton
from bot.slack.outbound.thread_meta import THREAD
from bot.slack.outbound.words import language_of
from bot.slack.render import Renderer
from core.messages import DECLINED, AssistantMessage
from state.records import CallTrace, RunRecord
from state.store import MetaStore

log = logging.getLogger(__name__)

AUTO_RESUMES = 2
"""How many times one run is carried on by itself; after that it waits for a person's Resume."""
GRACE_S = 10.0
"""How long a run may wait in the unshown index before another instance shows it (its own may be slow)."""


class CatchUp:
    def __init__(self, *, engine: Engine, meta: MetaStore, renderer: Renderer, interval_s: float,
                 dispatch: Callable[[RunButton], Awaitable[None]], grace_s: float = GRACE_S) -> None:
        self.engine = engine
        self.meta = meta
        self.renderer = renderer
        self.interval_s = interval_s
        self.grace_s = grace_s
        self.dispatch = dispatch
        """Hands work on (to whichever worker reads first)."""
        self._loop = Periodic("slack-catch-up", lambda: self.tick(), lambda: self.interval_s, logger=log,
                              failed="catch-up round failed")

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def tick(self) -> bool:
        return await claimed(self.engine.deps.store.locks, "catch-up", self.interval_s, self.show_unshown,
                             logger=log, skipped="catch-up skipped")

    async def show_unshown(self, now: float | None = None) -> int:
        """Show every run that stopped running over ``grace_s`` ago and was never shown; returns how many."""
        store, shown = self.engine.deps.store, 0
        for run_id in await store.runs_due("unshown", (now or time.time()) - self.grace_s):
            record = await store.load_run(run_id)
            if record is None or record.status == "running":  # expired, or moving again: its events show it
                continue
            transcript = await store.load_transcript(record.thread_id)
            answer = next((m.content for m in reversed(transcript) if isinstance(m, AssistantMessage)), record.answer)
            if await replay(self.renderer, record, answer):
                log.warning("run %s (%s) was never shown: shown now from its record", run_id, record.status)
                shown += 1
            else:
                await store.shown(run_id, record.thread_id)  # not a Slack thread: nothing to show here
        return shown

    async def lost(self, run_id: str) -> bool:
        """A run whose worker died while it only read (the engine's sweep asks): carried on by a worker, at most
        :data:`AUTO_RESUMES` times. False: leave it to be parked for a person's Resume."""
        record = await self.engine.run_record(run_id)
        where = await self.meta.get(THREAD, record.thread_id)
        if not where.get("channel"):
            return False
        if await self.meta.count(f"auto-resume:{run_id}", 24 * 3600) > AUTO_RESUMES:
            log.warning("run %s lost its worker %d times: it waits for a person's Resume", run_id, AUTO_RESUMES + 1)
            return False
        await self.dispatch(RunButton(kind="resume", run_id=run_id, channel=where["channel"],
                                      thread_ts=where["thread_ts"], user=AUTOMATIC))
        return True


async def replay(renderer: Renderer, record: RunRecord, answer: str) -> bool:
    """Show a run's pause or end from its record, as its own events would have (see :class:`CatchUp`); every
    message keeps its outbox key, so what did get out is edited to the same state, never posted twice."""
    # Each call as it ended (its last row: a call that asked a person has its "interrupted" row first), worded as the
    # live result would be: a person's no is "declined", a change that may have run is "unknown", never "failed".
    last = {e.call_id: e for e in record.trace if isinstance(e, CallTrace)}
    calls = [(e.call_id, e.tool, {DECLINED: "declined", "outcome_unknown": "unknown"}.get(e.error_code or "", e.status))
             for e in last.values()]
    if not await renderer.progress_of(record.run_id, record.thread_id, language_of(record.text, renderer.language),
                                      record.user_id, calls):
        return False
    head = {"run_id": record.run_id, "thread_id": record.thread_id, "seq": record.event_seq}
    event: Event
    if record.status == "finished" and record.stop_reason is not None:
        fallback = Fallback.model_validate(record.fallback) if record.fallback else None
        event = RunFinished(**head, stop_reason=record.stop_reason, steps=record.step, answer=answer,
                            by=record.stopped_by, fallback=fallback)
    elif record.status == "paused":
        event = LoopInterrupt(**head, step=record.step, pending=tuple(pending_view(p) for p in record.pending),
                              requester=record.user_id)
    elif record.status == "stalled":
        event = RunStalled(**head, step=record.step)
    else:
        return False
    await renderer(event)
    return True
