"""One run's mutable state and the steps the loop is made of: think, act, observe, pause, finish.

Read-only dependencies (:class:`RunDeps`) are kept apart from the state (:class:`Run`),
which is persisted as a :class:`state.RunRecord` plus append-only transcript and trace.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from bot.agent.decisions import CancelRun, Confirm, Decision, Decline, Expire, ProvideParams, ReplyInstead
from bot.agent.events import (
    Event,
    EventBus,
    LoopInterrupt,
    ModelStep,
    PendingView,
    RunFinished,
    ToolCallEvent,
    ToolResultEvent,
)
from bot.agent.limits import Limits, call_digest, should_stop
from bot.agent.models.base import AUTO, NONE, ChatModel, Completion, ModelError, ToolChoice
from bot.agent.prompt import STOP_INSTRUCTION, SYSTEM_PROMPT
from bot.agent.transcript import checked, fit, message_tokens
from core.messages import (
    AssistantMessage,
    Message,
    ResultStatus,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    error_result,
    one_line_summary,
)
from core.stops import STOP_WORDING, StopReason
from state.records import CallTrace, FinishTrace, PendingCall, RunRecord, StepTrace
from state.store import JournalAdapter, Store, Write
from tools.registry import Registry, ToolContext
from tools.runtime import Observation, execute_batch, execute_one

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class RunDeps:
    model: ChatModel
    registry: Registry
    store: Store
    bus: EventBus
    limits: Limits
    system_prompt: str = SYSTEM_PROMPT
    context_budget_tokens: int = 60_000
    interrupt_ttl_s: float = 1800.0
    summary_timeout_s: float = 30.0


@dataclass
class ThreadMemo:
    """What an engine remembers about a thread between turns (transcripts only grow): each message's token
    estimate, and how far the pairing check has already looked. Keeps a step's cost flat in long threads."""

    sizes: list[int]
    checked: int = 0


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    thread_id: str
    status: str
    stop_reason: str | None
    answer: str
    pending: tuple[PendingView, ...] = ()


def preview(text: str, limit: int = 200) -> str:
    """What run records keep of texts that live in full in the transcript."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _turn_before(transcript: Sequence[Message], index: int) -> int:
    """The start of the turn that contains ``index`` (a user message), for re-checking from a safe point."""
    for i in range(min(index, len(transcript)) - 1, -1, -1):
        if isinstance(transcript[i], UserMessage):
            return i
    return 0


def pending_view(p: PendingCall) -> PendingView:
    return PendingView(call_id=p.call.id, tool=p.call.name, token=p.token, interrupt_type=p.interrupt_type,
                       reason=p.reason, payload=p.payload)


class Run:
    def __init__(self, deps: RunDeps, record: RunRecord, transcript: list[Message],
                 memo: ThreadMemo | None = None) -> None:
        self.deps = deps
        self.record = record
        self.transcript = transcript
        self.cancel_requested = False
        self._messages: list[Message] = []
        self._counters: Counter[str] = Counter()
        self._tokens: list[str] = []
        self._audit: list[dict[str, str]] = []
        self._outbox: list[Event] = []
        # Results announced live during a batch, kept so an interrupted batch loses none of them.
        self._finished_calls: dict[str, Observation] = {}
        self._answer = ""
        self._segment_start = time.monotonic()
        self._journal = JournalAdapter(deps.store)
        # Kept as the transcript grows, so a step costs the same early and late in a long thread.
        self.memo = memo if memo is not None and len(memo.sizes) <= len(transcript) else ThreadMemo([])
        self._committed_status: str | None = None
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
        return should_stop(step=r.step, active_s=self.active_s(), fail_streak=r.fail_streak,
                           recent_calls=r.recent_calls, limits=self.deps.limits)

    def count(self, name: str, n: int = 1) -> None:
        self._counters[name] += n

    def append(self, message: Message) -> None:
        if isinstance(message, UserMessage):
            self._turn_start = len(self.transcript)
        self.transcript.append(message)
        self._messages.append(message)

    def _context(self, budget: int) -> list[Message]:
        """The transcript to send: pairing checked from the first turn not yet checked (the whole thread the
        first time this engine sees it), and fitted to the budget only when it does not fit as it is."""
        memo = self.memo
        start = min(self._turn_start, _turn_before(self.transcript, memo.checked)) if memo.checked else 0
        valid = checked(self.transcript, run_id=self.id, start=start)
        if len(valid) != len(self.transcript) or len(memo.sizes) > len(valid):
            memo.sizes.clear()  # repaired: recount
        memo.sizes.extend(message_tokens(m) for m in valid[len(memo.sizes):])
        memo.checked = len(valid)
        if sum(memo.sizes) <= budget:
            return valid
        return fit(valid, budget, memo.sizes)

    def emit(self, event_type: type[Any], **fields: Any) -> None:
        """Stage an event with the next sequence number; published after the next commit or flush."""
        self._outbox.append(event_type(run_id=self.id, thread_id=self.record.thread_id,
                                       seq=self.record.event_seq, **fields))
        self.record.event_seq += 1

    async def flush_events(self) -> None:
        outbox, self._outbox = self._outbox, []
        for event in outbox:
            await self.deps.bus.publish(event)

    async def commit(self) -> None:
        """Persist what this run added since the last commit in one atomic write, then publish events."""
        now = time.monotonic()
        self.record.active_ms += (now - self._segment_start) * 1000
        self._segment_start = now
        self.record.updated_at = time.time()
        await self.deps.store.commit(Write(
            run=self.record, messages=self._messages,
            counters=dict(self._counters), new_tokens=self._tokens, audit=self._audit,
            status_changed=self.record.status != self._committed_status,
        ))
        self._committed_status = self.record.status
        self._messages, self._counters, self._tokens, self._audit = [], Counter(), [], []
        await self.flush_events()

    def outcome(self) -> RunOutcome:
        r = self.record
        return RunOutcome(r.run_id, r.thread_id, r.status, r.stop_reason, self._answer or r.answer,
                          tuple(pending_view(p) for p in r.pending))

    def _ctx(self, call: ToolCall, confirmed_by: str | None = None) -> ToolContext:
        return ToolContext(run_id=self.id, thread_id=self.record.thread_id, user_id=self.record.user_id,
                           call_id=call.id, confirmed_by=confirmed_by)

    # --- Thought -------------------------------------------------------------------------------

    async def complete(self, tool_choice: ToolChoice, only: str | None = None,
                       instruction: str | None = None) -> Completion:
        tools = self.deps.registry.definitions(only=[only] if only else None)
        budget = self.deps.context_budget_tokens
        for attempt in range(2):
            messages: list[Message] = [SystemMessage(content=self.deps.system_prompt), *self._context(budget)]
            if instruction:
                messages.append(UserMessage(content=instruction))
            try:
                return await self.deps.model.complete(messages, tools, tool_choice=tool_choice)
            except ModelError as exc:
                if exc.kind != "context_window_exceeded" or attempt:
                    raise
                budget //= 2  # our token estimate was too generous for this model: try once with less
        raise AssertionError("unreachable")

    async def think(self, only: str | None = None) -> AssistantMessage:
        """One model call. Its reply (and the calls it asks for) is durable before any call runs."""
        self.record.step += 1
        completion = await self.complete(ToolChoice("tool", only) if only else AUTO, only=only)
        assistant = completion.message
        self.append(assistant)
        self.record.trace.append(StepTrace(
            step=self.record.step, model_latency_ms=round(completion.latency_ms, 2),
            asked_for_tools=bool(assistant.tool_calls), model_stop=completion.stop,
            input_tokens=completion.usage.input_tokens, output_tokens=completion.usage.output_tokens,
        ))
        self.count("steps")
        self.emit(ModelStep, step=self.record.step, latency_ms=round(completion.latency_ms, 2),
                  asked_for_tools=bool(assistant.tool_calls), stop=completion.stop,
                  text=assistant.content if assistant.tool_calls else "")
        if assistant.tool_calls:
            await self.commit()  # the calls are durable before any of them runs; an answer is saved by finish()
        return assistant

    # --- Action --------------------------------------------------------------------------------

    async def act(self, assistant: AssistantMessage, allowed: Collection[str] | None = None) -> list[Observation]:
        for call in assistant.tool_calls:
            spec = self.deps.registry.get(call.name)
            self.emit(ToolCallEvent, step=self.record.step, call_id=call.id, tool=call.name,
                      arguments=call.arguments, mutating=bool(spec and spec.mutating))
        await self.flush_events()
        return await execute_batch(
            assistant.tool_calls, registry=self.deps.registry, make_ctx=self._ctx, journal=self._journal,
            allowed=allowed, stated_reason=assistant.content, on_observation=self._announce,
        )

    async def _announce(self, obs: Observation) -> None:
        self._finished_calls[obs.call.id] = obs
        if obs.result is not None:
            self.emit(ToolResultEvent, step=self.record.step, call_id=obs.call.id, tool=obs.call.name,
                      status=obs.result.status, error_code=obs.result.error_code,
                      summary=one_line_summary(obs.result.content), latency_ms=round(obs.latency_ms, 2))
            await self.flush_events()

    # --- Observation ---------------------------------------------------------------------------

    async def observe(self, observations: Sequence[Observation], step: int | None = None,
                      approved_by: str | None = None) -> None:
        """Write one result per call id (or park it as pending), update the limit counters, commit."""
        step = step or self.record.step
        keep = self.deps.limits.identical_call_limit * 2
        for obs in observations:
            call = obs.call
            self._finished_calls.pop(call.id, None)
            digest = call_digest(call.name, obs.arguments or call.arguments)
            if obs.result is None:
                assert obs.interrupt is not None
                now = time.time()
                pending = PendingCall(
                    call=call, token=secrets.token_urlsafe(24), interrupt_type=obs.interrupt.interrupt_type,
                    reason=obs.interrupt.reason, payload=obs.interrupt.payload, arguments=obs.arguments,
                    step=step, created_at=now, expires_at=now + self.deps.interrupt_ttl_s,
                )
                self.record.pending.append(pending)
                self._tokens.append(pending.token)
                self.count("interrupts")
                status, code = "interrupted", None
            else:
                self.append(obs.result)
                status, code = obs.result.status, obs.result.error_code
                if status == "error":
                    self.record.fail_streak += 1
                    self.count("tool_failures")
                elif status == "ok":
                    self.record.fail_streak = 0
                self.record.recent_calls = [*self.record.recent_calls, digest][-keep:]
                self._audit_change(obs, approved_by)
            self.count("tool_calls")
            self.record.trace.append(CallTrace(step=step, call_id=call.id, tool=call.name, args_digest=digest,
                                         status=status, error_code=code, latency_ms=round(obs.latency_ms, 2)))
        await self.commit()

    def _audit_change(self, obs: Observation, approved_by: str | None) -> None:
        """Every change that was decided (run, failed, declined, expired) goes to the audit stream."""
        spec = self.deps.registry.get(obs.call.name)
        if spec is None or not spec.mutating or obs.result is None or obs.result.status == "skipped":
            return
        self._audit.append({
            "at": f"{time.time():.3f}", "run_id": self.id, "thread_id": self.record.thread_id,
            "call_id": obs.call.id, "tool": obs.call.name,
            "arguments": json.dumps(obs.arguments or obs.call.arguments, ensure_ascii=False, sort_keys=True),
            "requested_by": self.record.user_id or "", "approved_by": approved_by or "",
            "status": obs.result.status, "error_code": obs.result.error_code or "",
            "result": obs.result.content[:500],
        })

    # --- leaving the loop ----------------------------------------------------------------------

    async def pause(self, new: Sequence[PendingCall] | None = None) -> RunOutcome:
        self.record.status = "paused"
        shown = self.record.pending if new is None else new
        self.emit(LoopInterrupt, step=self.record.step, pending=tuple(pending_view(p) for p in shown))
        await self.commit()
        return self.outcome()

    async def finish(self, reason: StopReason, answer: str) -> RunOutcome:
        r = self.record
        # The record keeps a preview; the whole answer is the transcript's last message.
        r.status, r.stop_reason, r.answer = "finished", reason, preview(answer)
        self._answer = answer
        self.record.trace.append(FinishTrace(stop_reason=reason, steps=r.step,
                                             active_ms=round(self.active_s() * 1000, 1)))
        self.count(f"stop:{reason}")
        self.emit(RunFinished, stop_reason=reason, steps=r.step, answer=answer)
        await self.commit()
        return self.outcome()

    async def stop_early(self, reason: StopReason) -> RunOutcome:
        """A limit stopped the run: every call still gets its result, the user still gets a summary."""
        because = STOP_WORDING[reason].because
        self.answer_dangling("cancelled", reason, f"not finished: the run stopped because {because}")
        note = f"_Stopped early: {because}._"
        try:
            async with asyncio.timeout(self.deps.summary_timeout_s):
                completion = await self.complete(NONE, instruction=STOP_INSTRUCTION.format(reason=reason))
            summary = completion.message.content.strip() or self.plain_summary()
        except Exception as exc:
            log.warning("run %s: summary after %s failed: %r", self.id, reason, exc)
            summary = self.plain_summary()
        answer = f"{note}\n\n{summary}"
        self.append(AssistantMessage(content=answer))
        return await self.finish(reason, answer)

    async def fail(self, reason: StopReason, public: str) -> RunOutcome:
        """The model (or our code) failed: no more model calls, a plain readable answer."""
        self.answer_dangling("cancelled", reason, f"not finished: {public}")
        answer = f"_I could not finish: {public}._\n\n{self.plain_summary()}"
        self.append(AssistantMessage(content=answer))
        return await self.finish(reason, answer)

    async def cancel(self) -> RunOutcome:
        self.answer_dangling("cancelled", "cancelled", "cancelled by the user before it finished")
        for pending in list(self.record.pending):
            await self.resolve(pending, CancelRun(), by="cancel", commit=False)
        answer = f"_Stopped at your request._\n\n{self.plain_summary()}"
        self.append(AssistantMessage(content=answer))
        return await self.finish("cancelled", answer)

    def dangling_calls(self) -> list[ToolCall]:
        """Calls of the latest tool-using turn that have neither a result nor a pending question."""
        answered = {m.call_id for m in self.transcript if isinstance(m, ToolResultMessage)}
        waiting = {p.call.id for p in self.record.pending}
        for m in reversed(self.transcript):
            if isinstance(m, AssistantMessage) and m.tool_calls:
                return [c for c in m.tool_calls if c.id not in answered and c.id not in waiting]
        return []

    def answer_dangling(self, status: ResultStatus, code: str, message: str) -> None:
        for call in self.dangling_calls():
            finished = self._finished_calls.pop(call.id, None)
            if finished is not None and finished.result is not None:
                self.append(finished.result)  # it completed before the batch was interrupted
            else:
                self.answer(call, status, code, message)

    def answer(self, call: ToolCall, status: ResultStatus, code: str, message: str) -> None:
        """Write a synthetic result for a call that did not (or may not have) run."""
        self.append(error_result(call, code, message, status=status))
        self.emit(ToolResultEvent, step=self.record.step, call_id=call.id, tool=call.name, status=status,
                  error_code=code, summary=message, latency_ms=0.0)

    def plain_summary(self) -> str:
        """What ran in this run, from the transcript alone (used when the model cannot summarise)."""
        lines = []
        for m in self.transcript[-40:]:
            if isinstance(m, ToolResultMessage):
                outcome = "ok" if m.status == "ok" else f"{m.status} ({m.error_code})"
                lines.append(f"• `{m.name}`: {outcome}")
        done = "\n".join(lines[-10:]) if lines else "• no tool calls completed"
        return f"What ran:\n{done}\nAsk me to continue, or narrow the question."

    # --- resume --------------------------------------------------------------------------------

    async def resolve(self, pending: PendingCall, decision: Decision, by: str, *, commit: bool = True) -> None:
        """Answer one pending call: run it (confirm, params) or write why it did not run."""
        self.record.pending = [p for p in self.record.pending if p.token != pending.token]
        call = pending.call
        if isinstance(decision, Confirm):
            obs = await execute_one(call, registry=self.deps.registry, ctx=self._ctx(call, confirmed_by=by),
                                    journal=self._journal, override_args=pending.arguments)
        elif isinstance(decision, ProvideParams):
            obs = await execute_one(call, registry=self.deps.registry, ctx=self._ctx(call),
                                    journal=self._journal, override_args={**pending.arguments, **decision.values})
        elif isinstance(decision, Decline):
            why = f": {decision.reason}" if decision.reason else ""
            obs = Observation(call, error_result(call, "declined_by_user", f"{by} declined this call{why}"))
        elif isinstance(decision, ReplyInstead):
            obs = Observation(call, error_result(call, "user_replied_instead",
                                                 f"the user replied instead: {decision.text[:500]}",
                                                 status="cancelled"))
        elif isinstance(decision, Expire):
            obs = Observation(call, error_result(call, "expired", "nobody answered in time; nothing was run",
                                                 status="expired"))
        else:
            obs = Observation(call, error_result(call, "cancelled", "the run was stopped; nothing was run",
                                                 status="cancelled"))
        await self._announce(obs)
        if commit:
            await self.observe([obs], step=pending.step, approved_by=by if isinstance(decision, Confirm) else None)
        elif obs.result is not None:
            self.append(obs.result)
