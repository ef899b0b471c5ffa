"""One run's mutable state and the steps the loop is made of: think, act, observe, pause, finish.

Read-only dependencies (:class:`bot.agent.deps.RunDeps`) are kept apart from the state (:class:`Run`), which is
persisted as a :class:`state.RunRecord` plus the thread's append-only transcript. A person's answer to a paused
call goes through the same ``act`` → ``observe`` path as the model's calls (:meth:`Run.settle`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from bot.agent.decisions import Answers, CancelRun
from bot.agent.deps import RunDeps
from bot.agent.events import CallDecided, Event, LoopInterrupt, ModelStep, RunFinished, ToolCallEvent, ToolResultEvent
from bot.agent.fallback import Fallback, ran
from bot.agent.lease import Lease
from bot.agent.limits import call_digest, should_stop, steps_of
from bot.agent.models.base import AUTO, NONE, Completion, ModelError, ToolChoice
from bot.agent.outcome import RunOutcome, audit_entry, pending_view, preview
from bot.agent.prompt import STOP_INSTRUCTION
from bot.agent.thought import complete
from bot.agent.transcript import ThreadMemo, received, unanswered
from core.messages import (
    AssistantMessage,
    Message,
    ResultStatus,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    error_result,
    one_line_summary,
    result_body,
)
from core.redact import redact
from core.stops import STOP_WORDING, StopReason
from state.keys import new_token
from state.records import CallTrace, FinishTrace, PendingCall, RunRecord, StepTrace
from state.store import Write
from tools.registry import ToolContext
from tools.runtime import Batch, Observation, ToolDecision, execute_batch

log = logging.getLogger(__name__)

OUTCOME_UNKNOWN = "the change was started and may or may not have completed; check its effect before retrying"


class Run:
    def __init__(self, deps: RunDeps, record: RunRecord, transcript: list[Message],
                 memo: ThreadMemo | None = None, lease: Lease | None = None, *, stored: bool = True) -> None:
        self.deps, self.record, self.transcript, self.lease = deps, record, transcript, lease
        self.cancel_requested = False
        self.stopped_by: str | None = None
        self.stopping: StopReason | None = None  # the limit that stopped it, while its summary is asked for
        self._messages: list[Message] = []
        self._counters: Counter[str] = Counter()
        self._tokens, self._audit, self._outbox = list[str](), list[dict[str, str]](), list[Event]()
        # Results announced live during a batch, kept so an interrupted batch loses none of them; when each call of
        # the batch began, so a call cut off (a Stop, a limit) is traced with how long it ran.
        self._finished_calls, self._began = dict[str, Observation](), dict[str, float]()
        self._answer = ""
        self._segment_start = time.monotonic()
        # Kept as the transcript grows, so a step costs the same early and late in a long thread.
        self.memo = memo if memo is not None and len(memo.sizes) <= len(transcript) else ThreadMemo([])
        self._committed_status: str = record.status if stored else ""  # as stored ("": a run being made)
        self._turn_start = next((i for i in range(len(transcript) - 1, -1, -1)
                                 if isinstance(transcript[i], UserMessage)), 0)

    # --- bookkeeping -------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self.record.run_id

    def active_s(self) -> float:
        return self.record.active_ms / 1000 + (time.monotonic() - self._segment_start)

    def remaining_s(self) -> float:
        return max(self.deps.limits.max_wall_time_s - self.active_s(), 0.0)

    def limit_reached(self) -> StopReason | None:
        r = self.record
        return should_stop(step=r.step, active_s=self.active_s(), fail_streak=r.fail_streak, limits=self.deps.limits,
                           recent_calls=r.recent_calls, steps=steps_of(r.trace))

    def count(self, name: str, n: int = 1) -> None:
        self._counters[name] += n

    def append(self, message: Message) -> None:
        if isinstance(message, UserMessage):
            self._turn_start = len(self.transcript)
        self.transcript.append(message)
        self._messages.append(message)

    def emit(self, event_type: type[Any], **fields: Any) -> None:
        """Stage an event with the next number; published after the next commit or flush (or only numbered)."""
        if not self.deps.bus.quiet:
            self._outbox.append(event_type(run_id=self.id, thread_id=self.record.thread_id,
                                           seq=self.record.event_seq, **fields))
        self.record.event_seq += 1

    def announce(self, event_type: type[Any], **fields: Any) -> None:
        """Publish the first event of a run saved with its number taken (``event_seq`` 1: a ``Start``)."""
        self.record.event_seq -= 1
        self.emit(event_type, **fields)
        self.flush_events()

    def flush_events(self) -> None:
        outbox, self._outbox = self._outbox, []
        for event in outbox:
            self.deps.bus.publish(event)

    async def commit(self, *, final: bool = False) -> None:
        """Persist what this run added since the last commit in one atomic write, then publish events.
        ``final``: the turn's last write (a pause or the end), which may let go of the thread's lease too."""
        now = time.monotonic()
        self.record.active_ms += (now - self._segment_start) * 1000
        self._segment_start = now
        self.record.updated_at = time.time()
        lease = self.lease
        release, owner = (lease.release_by(final), lease.owner) if lease is not None else (None, None)
        changed = self.record.status != self._committed_status
        # Every write hands its counts on: the store keeps them in process up to 10 s and sends them with a later
        # write (no command of their own), so a process killed -9 loses at most those seconds, not its turn's.
        counted, self._counters = dict(self._counters), Counter()
        write = Write(run=self.record, messages=self._messages, counters=counted, new_tokens=self._tokens,
                      audit=self._audit, status_changed=changed, release_lease=release, lease_owner=owner,
                      was=self._committed_status)
        self._messages, self._tokens, self._audit = [], [], []
        self._committed_status = self.record.status
        # A Stop arriving meanwhile waits for this write: what it sent must not be sent twice, nor half.
        saving = asyncio.ensure_future(self.deps.store.commit(write))
        try:
            await asyncio.shield(saving)
        except asyncio.CancelledError:
            await saving
            self.flush_events()  # what it wrote is told (it may be the turn's end): a Stop after it changes nothing
            raise
        finally:
            if saving.done() and not saving.cancelled() and saving.exception() is None and release is not None \
                    and lease is not None:
                lease.released = True
        self.flush_events()

    def outcome(self) -> RunOutcome:
        r = self.record
        return RunOutcome(r.run_id, r.thread_id, r.status, r.stop_reason, self._answer or r.answer,
                          tuple(pending_view(p) for p in r.pending))

    def _ctx(self, call: ToolCall, confirmed_by: str | None) -> ToolContext:
        return ToolContext(run_id=self.id, thread_id=self.record.thread_id, user_id=self.record.user_id,
                           call_id=call.id, confirmed_by=confirmed_by, unattended=self.record.unattended)

    # --- Thought -------------------------------------------------------------------------------

    async def complete(self, tool_choice: ToolChoice, instruction: str | None = None) -> Completion:
        return await complete(self.deps, self.transcript, self.memo, turn_start=self._turn_start, run_id=self.id,
                              tool_choice=tool_choice, instruction=instruction)

    async def think(self) -> AssistantMessage:
        """One model call. Its reply (and the calls it asks for) is durable before any call runs."""
        self.record.step += 1
        started = time.monotonic()
        try:
            completion = await self.complete(AUTO)
        except (ModelError, asyncio.CancelledError, TimeoutError) as exc:  # the step that ended the run keeps its
            took = round((time.monotonic() - started) * 1000, 2)  # row: how long it took, and why (a Stop, a limit)
            why = f"error:{exc.kind}" if isinstance(exc, ModelError) else "cut_off"
            self.record.trace.append(StepTrace(step=self.record.step, asked_for_tools=False, model_latency_ms=took,
                                               model_stop=why))
            self.count("steps")  # a model call made, as record.step counts it
            raise
        assistant = received(completion.message, self.transcript, self.memo)  # no secret; ids new to the thread
        self.append(assistant)
        tokens, latency = asdict(completion.usage), round(completion.latency_ms, 2)
        self.record.trace.append(StepTrace(step=self.record.step, model_latency_ms=latency, **tokens,
                                           asked_for_tools=bool(assistant.tool_calls), model_stop=completion.stop))
        self.count("steps")
        for name, n in tokens.items():
            if n:  # (a zero would still cost a write)
                self.count(name, n)
        self.emit(ModelStep, step=self.record.step, latency_ms=latency, asked_for_tools=bool(assistant.tool_calls),
                  stop=completion.stop, text=assistant.content if assistant.tool_calls else "", **tokens)
        if any((spec := self.deps.registry.get(c.name)) is not None and spec.mutating for c in assistant.tool_calls):
            # A change's call is durable before it runs. Read-only calls are saved with their results (one write
            # per step): if this worker dies meanwhile, the step is thought again and nothing was changed.
            await self.commit()
        return assistant

    # --- Action --------------------------------------------------------------------------------

    async def act(self, calls: Sequence[ToolCall], *, decisions: Mapping[str, ToolDecision] | None = None,
                  stated_reason: str = "") -> Batch:
        """Run a batch: the model's new calls, or calls a person has just decided (announced when proposed)."""
        for call in calls:
            self._began[call.id] = time.monotonic()
            if decisions is None or call.id not in decisions:
                spec = self.deps.registry.get(call.name)
                self.emit(ToolCallEvent, step=self.record.step, call_id=call.id, tool=call.name,
                          arguments=call.arguments, mutating=bool(spec and spec.mutating))
        self.flush_events()
        return await execute_batch(calls, registry=self.deps.registry, make_ctx=self._ctx,
                                   journal=self.deps.store.journal, decisions=decisions,
                                   stated_reason=stated_reason, on_observation=self._announce)

    def _announce(self, obs: Observation) -> None:
        self._finished_calls[obs.call.id] = obs
        if obs.result is not None:
            self.emit(ToolResultEvent, step=self.record.step, call_id=obs.call.id, tool=obs.call.name,
                      status=obs.result.status, error_code=obs.result.error_code,
                      summary=one_line_summary(obs.result.content), latency_ms=round(obs.latency_ms, 2),
                      data=result_body(obs.result.content))
            self.flush_events()

    # --- Observation ---------------------------------------------------------------------------

    async def observe(self, batch: Batch, step: int | None = None) -> list[PendingCall]:
        """Write one result per call id (or park it as a question), update the limit counters, commit.
        Returns the questions this batch raised: the loop pauses on them."""
        step = step or self.record.step
        questions: list[PendingCall] = []
        for obs in batch.observations:
            call = obs.call
            self._finished_calls.pop(call.id, None)
            digest = call_digest(call.name, obs.arguments or call.arguments)
            if obs.result is None:
                assert obs.interrupt is not None
                now = time.time()
                questions.append(PendingCall(
                    call=call, token=new_token(self.record.run_id), interrupt_type=obs.interrupt.interrupt_type,
                    reason=obs.interrupt.reason, payload=obs.interrupt.payload, arguments=obs.arguments,
                    step=step, created_at=now, expires_at=now + self.deps.interrupt_ttl_s))
                self.count("interrupts")
                status, code = "interrupted", None
            else:
                self.append(obs.result)
                status, code = obs.result.status, obs.result.error_code
                self._book(call, digest, obs.arguments, obs.result)
            self.record.trace.append(CallTrace(step=step, call_id=call.id, tool=call.name, args_digest=digest,
                                               status=status, error_code=code, latency_ms=round(obs.latency_ms, 2)))
        self.record.pending.extend(questions)
        self._tokens.extend(q.token for q in questions)
        await self.commit()
        return questions

    def _book(self, call: ToolCall, digest: str, arguments: dict[str, Any], result: ToolResultMessage) -> None:
        """A result counted as every result is, whoever wrote it: the failure streak (a person's decline is their
        decision, no failure), the loop rule's recent calls, a change's audit, the stats (a call that asked a person
        is counted when it runs)."""
        if result.failed:
            self.record.fail_streak += 1
            self.count("tool_failures")
        elif result.status == "ok":
            self.record.fail_streak = 0
        self.record.recent_calls = [*self.record.recent_calls, digest][-self.deps.limits.identical_call_limit * 2:]
        self._audit_change(call, arguments, result, self.record.approvals.pop(call.id, None))
        self.count("tool_calls")

    def _audit_change(self, call: ToolCall, arguments: dict[str, Any], result: ToolResultMessage,
                      decided_by: str | None) -> None:
        """Every change that was decided (run, failed, declined, expired, unknown) goes to the audit stream."""
        spec = self.deps.registry.get(call.name)
        if spec is not None and spec.mutating and result.status != "skipped":
            self._audit.append(audit_entry(self.record, call, arguments, result, decided_by))

    # --- a person's answers --------------------------------------------------------------------

    def decide(self, answers: Answers) -> None:
        """Take the decided calls off the open questions and say so; the next batch runs them."""
        decided = {p.token for p, _ in answers.decided}
        self.record.pending = [p for p in self.record.pending if p.token not in decided]
        for pending, decision in answers.decided:
            if decision.kind in ("confirmed", "declined"):  # kept: a crash mid-change must not lose who decided
                self.record.approvals[pending.call.id] = answers.by
            values = {k: str(v) for k, v in getattr(decision, "values", {}).items()}
            self.emit(CallDecided, call_id=pending.call.id, tool=pending.call.name, token=pending.token,
                      decision=decision.kind, by=answers.by, at=time.time(), values=values,
                      asked_at=pending.created_at)
        self.count("resumed", sum(1 for _, d in answers.decided if d.kind not in ("expired", "cancelled")))

    async def settle(self, answers: Answers) -> list[PendingCall]:
        """Run the decided calls through the batch path; returns any question they raise in turn."""
        calls = [p.call for p, _ in answers.decided]
        decisions = {p.call.id: d.for_tool(p, answers.by) for p, d in answers.decided}
        batch = await self.act(calls, decisions=decisions)
        return await self.observe(batch, step=answers.decided[0][0].step)

    # --- leaving the loop ----------------------------------------------------------------------

    async def pause(self, questions: Sequence[PendingCall]) -> RunOutcome:
        """Wait for people. Only new questions are shown (older ones of the batch are still on screen), but the
        pause is always announced, so front ends let go of the run until someone answers, on any instance."""
        self.record.status = "paused"
        self.emit(LoopInterrupt, step=self.record.step, pending=tuple(pending_view(p) for p in questions),
                  requester=self.record.user_id)
        await self.commit(final=True)
        return self.outcome()

    async def finish(self, reason: StopReason, answer: str, fallback: Fallback | None = None) -> RunOutcome:
        r = self.record
        last = next((e for e in reversed(r.trace) if isinstance(e, StepTrace)), None)
        if reason == "final_answer" and last is not None and last.model_stop == "max_tokens":
            reason = "cut_off"  # the answer stopped mid-sentence at the output limit: never "Done"
        # The record keeps a preview; the whole answer is the transcript's last message.
        r.status, r.stop_reason, r.answer = "finished", reason, preview(answer)
        r.stopped_by, r.fallback = self.stopped_by, fallback.model_dump(mode="json") if fallback else None
        self._answer = answer
        r.trace.append(FinishTrace(stop_reason=reason, steps=r.step, active_ms=round(self.active_s() * 1000, 1)))
        self.count(f"stop:{reason}")
        self.emit(RunFinished, stop_reason=reason, steps=r.step, answer=answer, by=self.stopped_by, fallback=fallback,
                  may_have_changed=any((spec := self.deps.registry.get(e.tool)) is None or spec.mutating
                                       for e in r.trace if isinstance(e, CallTrace)))
        await self.commit(final=True)
        return self.outcome()

    def ended(self) -> bool:  # the turn's last write made: a Stop or the deadline landing in it changes nothing
        return self.record.status in ("finished", "paused") and self._committed_status == self.record.status

    async def stop_early(self, reason: StopReason) -> RunOutcome:
        """A limit stopped the run: every call still gets its result, the user still gets a summary."""
        self.stopping = self.stopping or reason  # the deadline cutting its summary short does not make it a timeout
        because = STOP_WORDING[reason].because
        await self.answer_dangling("cancelled", reason, f"not finished: the run stopped because {because}")
        try:
            async with asyncio.timeout(self.deps.summary_timeout_s):
                completion = await self.complete(NONE, instruction=STOP_INSTRUCTION.format(reason=reason))
            summary = redact(completion.message.content).strip()
        except Exception as exc:
            log.warning("run %s: summary after %s failed: %r", self.id, reason, exc)
            summary = ""
        return await self._fall_back(Fallback(kind="early", reason=reason, summary=summary, ran=ran(self.transcript)))

    async def fail(self, reason: StopReason, public: str, code: str = "") -> RunOutcome:
        """The model (or our code) failed: no more model calls, a plain readable answer (``code``: which failure,
        for front ends to word it in the thread's language; ``public`` is its English)."""
        await self.answer_dangling("cancelled", reason, f"not finished: {public}")
        return await self._fall_back(Fallback(kind="failed", reason=reason, why=public, code=code,
                                              ran=ran(self.transcript)))

    async def cancel(self, by: str | None = None) -> RunOutcome:
        await self.answer_dangling("cancelled", "cancelled", "cancelled by the user before it finished")
        if self.record.pending:
            answers = Answers([(p, CancelRun()) for p in self.record.pending], by or "cancel")
            self.decide(answers)
            await self.settle(answers)
        self.stopped_by = by or self.stopped_by
        return await self._fall_back(Fallback(kind="stopped", reason="cancelled",
                                              at=time.strftime("%H:%M UTC", time.gmtime()), ran=ran(self.transcript)))

    async def _fall_back(self, fallback: Fallback) -> RunOutcome:
        """Finish with an answer OpsPilot composed: English in the transcript, facts for front ends to word."""
        self.append(AssistantMessage(content=fallback.english()))
        return await self.finish(fallback.reason, fallback.english(), fallback)

    async def answer_dangling(self, status: ResultStatus, code: str, message: str) -> None:
        """Every call left without a result gets one. A change the journal shows as started may have run:
        it is answered ``outcome_unknown``, never as if nothing happened."""
        dangling = unanswered(self.transcript, {p.call.id for p in self.record.pending})
        if any((spec := self.deps.registry.get(c.name)) is None or spec.mutating for c in dangling):
            journaled = await self.deps.store.journal.arguments(self.id)
        else:
            journaled = {}
        for call in dangling:
            finished = self._finished_calls.pop(call.id, None)
            if finished is not None and finished.result is not None:
                self.append(finished.result)  # it completed before the batch was interrupted
                self._book(call, call_digest(call.name, finished.arguments or call.arguments), finished.arguments,
                           finished.result)
                self._traced(call, finished.result.status, finished.result.error_code, finished.latency_ms)
            elif call.id in journaled:  # audited with what it started with (a form's environment), not the model's
                self.answer(call, "error", "outcome_unknown", OUTCOME_UNKNOWN, journaled[call.id] or None)
            else:
                self.answer(call, status, code, message)

    def _traced(self, call: ToolCall, status: str, code: str | None, latency_ms: float = 0.0) -> None:
        # the row of a call answered without running to its end (a Stop, a limit, a repair), as observe writes it
        self.record.trace.append(CallTrace(step=self.record.step, call_id=call.id, tool=call.name, status=status,
                                           args_digest=call_digest(call.name, call.arguments), error_code=code,
                                           latency_ms=round(latency_ms, 2)))

    def answer(self, call: ToolCall, status: ResultStatus, code: str, message: str,
               arguments: dict[str, Any] | None = None) -> None:
        """Write a synthetic result for a call that did not (or may not have) run."""
        result = error_result(call, code, message, status=status)
        self.append(result)
        self._book(call, call_digest(call.name, arguments or call.arguments), arguments or call.arguments, result)
        began = self._began.get(call.id)  # how long it ran before it was cut off (none: it never began here)
        took = round((time.monotonic() - began) * 1000, 2) if began is not None else 0.0
        self._traced(call, status, code, took)
        self.emit(ToolResultEvent, step=self.record.step, call_id=call.id, tool=call.name, status=status,
                  error_code=code, summary=message, latency_ms=took,
                  data={"ok": False, "errorCode": code, "message": message})
