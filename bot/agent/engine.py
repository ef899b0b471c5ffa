"""The engine: starts turns, applies people's answers, cancels, repairs and recovers runs.

Each public method is one unit of work with one broad boundary (``_turn``): a run ends with an outcome, never with
a tool's or the model's exception. What can reach the caller is drawn in :mod:`bot.agent.engine_errors` (plus
``state.StoreError``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import MappingProxyType

from bot.agent import engine_errors as errors
from bot.agent.decisions import (
    Answers,
    CancelRun,
    Decision,
    Expire,
    ReplyInstead,
    SetAside,
    check_open_and_fits,
    claim_all,
)
from bot.agent.deps import RunDeps
from bot.agent.events import RunStalled, RunStarted
from bot.agent.fallback import Fallback, ran
from bot.agent.lease import Lease, hold
from bot.agent.loop import react_loop
from bot.agent.models.base import ModelError
from bot.agent.outcome import RunOutcome, preview
from bot.agent.run import Run
from bot.agent.transcript import ThreadMemo
from core.messages import UserMessage, took
from core.outages import outage
from core.redact import redact
from state.keys import new_run_id
from state.records import RunRecord, Ticket
from state.store import Start
from state.store_errors import LeaseLost, StoreError, StoreUnavailable

log = logging.getLogger(__name__)
MODEL = outage("the model")
RUNS = MappingProxyType({"runs": 1})  # a new run counted by the write that makes it


@dataclass(frozen=True)
class EngineOptions:
    lease_ttl_ms: int = 30_000
    lease_wait_s: float = 10.0
    cancel_poll_s: float = 0.5
    handover_s: float = 5.0
    """How long a turn waits for front ends to record its events before it hands the thread over."""
    claim_stale_s: float = 30.0
    """A claim this old whose question is still open lost its holder (a live one decides or lets go within
    ``lease_wait_s``): the next answer takes it over instead of being told "already handled" forever."""


class Engine:
    def __init__(self, deps: RunDeps, options: EngineOptions | None = None) -> None:
        self.deps = deps
        self.options = options or EngineOptions()
        self.instance = uuid.uuid4().hex[:12]
        self._running: dict[str, tuple[Run, asyncio.Task[RunOutcome]]] = {}
        self._memos: OrderedDict[str, ThreadMemo] = OrderedDict()
        self._watcher: asyncio.Task[None] | None = None

    # --- public API ------------------------------------------------------------------------------

    async def ask(self, thread_id: str, text: str, *, user_id: str | None = None, request_id: str | None = None,
                  context: str = "", unattended: bool = False, may_set_aside: SetAside | None = None) -> RunOutcome:
        """A new message in a thread. If the thread's run is waiting for a person, the message answers it (if
        ``may_set_aside`` allows its author each open question: the front's rule; else :class:`NotYours`), and its
        author asks for what follows. ``request_id`` (e.g. the Slack message) makes a redelivered message a no-op.
        ``context``: quoted material the model reads before the question (the thread it was asked in).
        ``unattended``: no person asked (an alert did), so every change waits for one."""
        question = UserMessage(content=redact(f"{context}\n\n{text}" if context else text), user_id=user_id,
                               request_id=request_id)
        # The usual case, nothing under way in the thread: the turn's opening makes the run.
        start = Start(_new_record(thread_id, text, user_id, unattended, request_id, first_event=1), question, RUNS)
        async with self._lease(thread_id, start=start) as lease:
            if lease.started:
                made = Run(self.deps, start.run, lease.transcript, self._memo(thread_id), lease)
                made.announce(RunStarted, user_id=user_id, text=text)
                return await self._drive(made)
            latest, transcript = lease.run, lease.transcript  # read once for the whole turn
            if latest is not None and request_id is not None and took(transcript, request_id):
                # Taken already: the work was delivered again. If its worker died while on it (we hold the lease,
                # so it is gone), this worker carries the turn on; otherwise there is nothing to do.
                if latest.request_id != request_id or latest.status not in ("running", "stalled"):
                    return Run(self.deps, latest, []).outcome()
                orphan = self._run(latest, lease)
                await self._repair(orphan)
                if orphan.record.pending:
                    return await orphan.pause(orphan.record.pending)
                orphan.record.status = "running"
                return await self._drive(orphan)
            run = self._run(latest, lease) if latest is not None and latest.status != "finished" else None
            if run is not None and run.record.status in ("running", "stalled"):  # we hold the lease: its worker
                await self._repair(run)  # is gone, so it is closed out first
                if not run.record.pending:  # said as what it is (a restart, a deploy), not an internal error
                    await run.fail("worker_lost", "its worker stopped, or lost the state store, before it finished; "
                                   "the newer message in this thread is answered with what it found", "worker_lost")
                    run = None
            if run is not None:  # paused: the message answers its open questions, through the tool path
                await claim_all(run.record, by := user_id or "user", self.deps.store.locks,
                                stale_s=self.options.claim_stale_s, may_set_aside=may_set_aside)
                answers = Answers([(p, ReplyInstead(text)) for p in run.record.pending], by)
                run.decide(answers)
                await run.settle(answers)
                run.record.user_id = user_id or run.record.user_id  # a change it leads to is theirs to have asked
                run.record.unattended = run.record.unattended or unattended  # a follow-up's: a Confirm still waits
            else:
                record = _new_record(thread_id, text, user_id, unattended, request_id)
                # The transcript as it is now (a run closed out above appended to it).
                run = Run(self.deps, record, lease.transcript, self._memo(record.thread_id), lease, stored=False)
                run.count("runs")
                run.emit(RunStarted, user_id=user_id, text=text)
            run.record.status, run.record.request_id = "running", request_id
            run.append(question)
            await run.commit()
            return await self._drive(run)

    async def ticket(self, token: str) -> Ticket:
        """What a question's token opens (the pending call, its run, thread and requester): one store read."""
        ticket = await self.deps.store.load_ticket(token)
        if ticket is None:
            raise errors.NotPending("unknown or expired request")
        return ticket

    async def answer(self, ticket: Ticket, decision: Decision, *, by: str) -> RunOutcome:
        """A person's answer to one paused call. Exactly one answer per question is ever applied: the first
        to claim it; everyone after is told who did (:class:`~bot.agent.engine_errors.AlreadyHandled`)."""
        pending = ticket.pending
        if not isinstance(decision, Expire | CancelRun) and time.time() > pending.expires_at:
            raise errors.InterruptExpired("this request expired")
        await check_open_and_fits(pending, decision, self.deps.registry, self.deps.store.locks)
        claim = await self.deps.store.locks.claim(pending.token, by)
        if not claim.won and claim.age_s < self.options.claim_stale_s:
            stale = self.options.claim_stale_s
            raise errors.AlreadyHandled(claim.holder, unsettled_s=stale - claim.age_s, age_s=claim.age_s)
        try:
            async with self._lease(ticket.thread_id, run_id=ticket.run_id) as lease:
                run = self._opened(lease, ticket.run_id)  # the one read of the run record, under the lease
                if run.record.status in ("running", "stalled"):
                    # We hold the lease, so its worker is gone: answer what it left (a started change is
                    # outcome_unknown) before this decision goes on.
                    await self._repair(run)
                record = run.record
                current = next((p for p in record.pending if p.token == pending.token), None)
                if current is None and not claim.won:
                    raise errors.AlreadyHandled(claim.holder)
                if current is None:
                    raise errors.NotPending("this call is not waiting for an answer (it may have been handled already)")
                if not claim.won:
                    log.warning("run %s: %s claimed %s %.0fs ago and never decided; %s takes over", record.run_id,
                                claim.holder, pending.call.name, claim.age_s, by)
                    await self.deps.store.locks.take_claim(pending.token, by)
                answers = Answers([(current, decision)], by)
                run.decide(answers)
                run.record.status = "running"
                await run.commit()  # the decision is durable (and shown) before the call runs
                return await self._drive(run, answers)
        except errors.ThreadBusy:
            if claim.won:
                await self.deps.store.locks.release_claim(pending.token)  # nothing happened: the question stays open
            raise

    async def resume_token(self, token: str, decision: Decision, *, by: str) -> RunOutcome:
        return await self.answer(await self.ticket(token), decision, by=by)

    async def cancel(self, run_id: str, *, by: str | None = None) -> RunOutcome | None:
        """Stop a run wherever it is; every call id already issued gets a result."""
        local = self._running.get(run_id)
        if local is not None:
            run, task = local
            run.cancel_requested, run.stopped_by = True, by
            task.cancel()
            return await asyncio.shield(task)
        record = await self._load(run_id)
        if record.status == "finished":
            return None
        try:
            # A running run's lease is held by its worker; if we get it, that worker is gone.
            async with self._lease(record.thread_id, run_id=run_id, wait=record.status != "running") as lease:
                run = self._opened(lease, run_id)
                if run.record.status == "running":
                    await self._repair(run)  # a change it had started is answered outcome_unknown
                if run.record.status != "finished":
                    return await run.cancel(by)
                return run.outcome()
        except errors.ThreadBusy:
            if record.status != "running":
                raise
        await self.deps.store.locks.request_cancel(run_id, by or "")  # the instance running it polls for this
        latest = await self._load(run_id)
        if latest.status != "running":  # it paused or ended meanwhile: nobody will read the flag
            await self.deps.store.locks.clear_cancel(run_id)
            return await self.cancel(run_id, by=by) if latest.status != "finished" else None
        return None

    async def expire_due(self, run_id: str, now: float | None = None) -> RunOutcome | None:
        """Answer every pending call whose time is up with ``expired``."""
        record = await self._load(run_id)
        outcome: RunOutcome | None = None
        for pending in record.pending:
            if pending.expires_at <= (now or time.time()):
                ticket = Ticket(run_id=run_id, thread_id=record.thread_id, requester=record.user_id, pending=pending)
                with contextlib.suppress(errors.AlreadyHandled, errors.NotPending):
                    outcome = await self.answer(ticket, Expire(), by="expiry")
        return outcome

    async def repair(self, run_id: str) -> RunOutcome | None:
        """A worker died mid-run: answer what it left dangling (a started change → ``outcome_unknown``)
        and park the run as ``stalled`` until someone resumes it. None if its worker is still alive."""
        record = await self._load(run_id)
        try:
            async with self._lease(record.thread_id, run_id=run_id, wait=False) as lease:
                run = self._opened(lease, run_id)
                if run.record.status != "running":
                    return None
                await self._repair(run, park=True)
                return run.outcome()
        except errors.ThreadBusy:
            return None

    async def recover(self, run_id: str, *, on_taken: Callable[[], Awaitable[None]] | None = None) -> RunOutcome:
        """Repair a run whose worker died (never re-running a started change) and carry on with it. ``on_taken``:
        awaited once this instance holds the thread and the run still needs it (say so before it moves on)."""
        record = await self._load(run_id)
        async with self._lease(record.thread_id, run_id=run_id, wait=False) as lease:
            run = self._opened(lease, run_id)
            if run.record.status in ("finished", "paused"):
                return run.outcome()
            if on_taken is not None:
                await on_taken()
            if run.record.status == "running":
                await self._repair(run)
            if run.record.pending:
                return await run.pause(run.record.pending)
            run.record.status = "running"
            return await self._drive(run)

    async def handled(self, thread_id: str, request_id: str, *, look_back: int = 200) -> bool:
        """Whether the thread already took the message ``request_id`` (a redelivery must not run it again)."""
        return took(await self.deps.store.load_transcript(thread_id), request_id, look_back)

    async def knows_thread(self, thread_id: str) -> bool:
        """Whether this thread has had a run (a reply there needs no mention)."""
        return await self.deps.store.thread_run(thread_id) is not None

    async def under_way(self, thread_id: str) -> bool:
        """Whether the thread's latest run has not finished (running, or waiting for a person)."""
        latest = await self._latest(thread_id)
        return latest is not None and latest.status != "finished"

    async def run_record(self, run_id: str) -> RunRecord:
        return await self._load(run_id)

    async def questions(self, *, expiring_before: float) -> list[Ticket]:
        """Open questions of paused runs that expire before ``expiring_before`` (for reminders)."""
        tickets: list[Ticket] = []
        for run_id in await self.deps.store.runs_due("paused", expiring_before):
            record = await self.deps.store.load_run(run_id)
            if record is not None:
                tickets += [Ticket(run_id=run_id, thread_id=record.thread_id, requester=record.user_id, pending=p)
                            for p in record.pending]
        return tickets

    # --- the one broad boundary per run ----------------------------------------------------------

    async def _drive(self, run: Run, answers: Answers | None = None) -> RunOutcome:
        task = asyncio.create_task(self._turn(run, answers), name=f"run-{run.id}")
        self._running[run.id] = (run, task)
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch_cancels(), name="cancel-watcher")
        try:
            return await task
        finally:
            self._running.pop(run.id, None)

    async def _turn(self, run: Run, answers: Answers | None) -> RunOutcome:
        settled = answers is None  # the decision (if any) applied: see StoreLostMidRun.applied
        try:
            if answers is not None:
                # What a person decided runs to its end (bounded by the tool's own timeout), whatever time the
                # run has left: cutting a confirmed change short would leave its outcome unknown.
                questions = await run.settle(answers)
                settled = True
                if questions or run.record.pending:
                    return await run.pause(questions)  # asked again, or other questions still open
                if answers.expired_only:  # composed, so each front end words it in the thread's language
                    composed = Fallback(kind="early", reason="interrupted", ran=ran(run.transcript))
                    return await run.finish("interrupted", composed.english(), composed)
            try:
                async with asyncio.timeout(run.remaining_s()):
                    return await react_loop(run)
            except TimeoutError:
                return run.outcome() if run.ended() else await run.stop_early(run.stopping or "timeout")
        except asyncio.CancelledError:
            if not run.cancel_requested:
                raise  # the process is going down: the lease lapses and recovery answers the calls
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            return run.outcome() if run.ended() else await asyncio.shield(run.cancel())
        except ModelError as exc:
            if exc.kind in ("unreachable", "api_error"):  # the provider's outage (a 429 is not one): told once
                MODEL.failed(exc)
                log.info("run %s: model error %s", run.id, exc)
            else:
                log.warning("run %s: model error %s", run.id, exc)
            return await run.fail("model_error", exc.public, exc.kind)
        except StoreError as exc:  # the run is under way: never "not taken" (a taker of its lease goes on: no word)
            if not isinstance(exc, errors.StoreLostMidRun | LeaseLost):
                raise errors.StoreLostMidRun(str(exc), run.id, applied=settled) from exc
            raise
        except Exception:
            ref = uuid.uuid4().hex[:8]
            log.exception("run %s failed with an internal error (ref %s)", run.id, ref)
            return await run.fail("internal_error", f"an internal error occurred (ref {ref})", "internal_error")

    async def _watch_cancels(self) -> None:
        """Another instance may ask, through the store, to cancel a run running here. One watcher per
        engine asks about all of its runs in one call, however many there are."""
        while self._running:
            await asyncio.sleep(self.options.cancel_poll_s)
            running = dict(self._running)
            if not running:
                return
            try:
                requested = await self.deps.store.locks.cancel_requests(list(running))
            except StoreError as exc:  # an outage is told once by the outage log (core/outages.py)
                (log.debug if isinstance(exc, StoreUnavailable) else log.warning)(
                    "could not poll for cancellations: %s", exc)
                continue
            for run_id, by in requested.items():
                run, task = running[run_id]
                if not task.done():
                    run.cancel_requested, run.stopped_by = True, by or None
                    task.cancel()

    # --- helpers ---------------------------------------------------------------------------------

    def _lease(self, thread_id: str, *, run_id: str | None = None, start: Start | None = None,
               wait: bool = True) -> contextlib.AbstractAsyncContextManager[Lease]:
        """Hold the thread for one turn (see :mod:`bot.agent.lease`), with the run and transcript it starts from."""
        o = self.options
        return hold(self.deps.store, self.deps.bus, self.instance, thread_id, run_id=run_id, start=start,
                    ttl_ms=o.lease_ttl_ms, wait_s=o.lease_wait_s if wait else 0, handover_s=o.handover_s)

    async def _load(self, run_id: str) -> RunRecord:
        record = await self.deps.store.load_run(run_id)
        if record is None:
            raise errors.RunNotFound(f"run {run_id} not found (it may have expired)")
        return record

    async def _latest(self, thread_id: str) -> RunRecord | None:
        run_id = await self.deps.store.thread_run(thread_id)
        return await self.deps.store.load_run(run_id) if run_id else None

    def _run(self, record: RunRecord, lease: Lease) -> Run:
        return Run(self.deps, record, lease.transcript, self._memo(record.thread_id), lease)

    def _opened(self, lease: Lease, run_id: str) -> Run:
        if lease.run is None or lease.run.run_id != run_id:
            raise errors.RunNotFound(f"run {run_id} not found (it may have expired)")
        return self._run(lease.run, lease)

    def _memo(self, thread_id: str) -> ThreadMemo:
        memo = self._memos.pop(thread_id, None) or ThreadMemo([])
        self._memos[thread_id] = memo
        while len(self._memos) > 1024:
            self._memos.popitem(last=False)
        return memo

    async def _repair(self, run: Run, *, park: bool = False) -> None:
        """Answer the calls a dead worker left behind. A started change is never re-run. Open questions stay
        open, and their claims stay with whoever holds them (a stale one is taken over by the next answer)."""
        await run.answer_dangling("cancelled", "interrupted_by_restart", "the worker stopped before this call ran")
        if run.record.pending:
            run.record.status = "paused"
        elif park:
            run.record.status = "stalled"
            run.emit(RunStalled, step=run.record.step)
        await run.commit()


def _new_record(thread_id: str, text: str, user_id: str | None, unattended: bool, request_id: str | None, *,
                first_event: int = 0) -> RunRecord:
    """A new run, running. ``first_event``: event numbers taken already (see :meth:`Run.announce`)."""
    return RunRecord(run_id=new_run_id(thread_id), thread_id=thread_id, user_id=user_id, text=preview(redact(text)),
                     created_at=(now := time.time()), updated_at=now, unattended=unattended, request_id=request_id,
                     first_request_id=request_id, event_seq=first_event)
