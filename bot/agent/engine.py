"""The engine: starts turns, resumes paused runs, cancels and recovers them.

Each public method is one unit of work with one broad boundary (``_drive``): a run
ends with an outcome, never with a tool's or the model's exception. What can reach
the caller is drawn in :mod:`bot.agent.errors` (plus ``state.StoreError``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from pydantic import ValidationError

from bot.agent.decisions import CancelRun, Confirm, Decision, Expire, ProvideParams, ReplyInstead
from bot.agent.errors import (
    AlreadyHandled,
    InterruptExpired,
    InvalidDecision,
    NotPending,
    RunNotFound,
    ThreadBusy,
)
from bot.agent.events import RunStarted
from bot.agent.loop import react_loop
from bot.agent.models.base import ModelError
from bot.agent.run import Run, RunDeps, RunOutcome, ThreadMemo, preview
from core.messages import UserMessage
from state.errors import StoreError
from state.records import PendingCall, RunRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineOptions:
    lease_ttl_ms: int = 30_000
    lease_wait_s: float = 10.0
    cancel_poll_s: float = 0.5


class Engine:
    def __init__(self, deps: RunDeps, options: EngineOptions | None = None) -> None:
        self.deps = deps
        self.options = options or EngineOptions()
        self.instance = uuid.uuid4().hex[:12]
        self._running: dict[str, tuple[Run, asyncio.Task[RunOutcome]]] = {}
        self._memos: OrderedDict[str, ThreadMemo] = OrderedDict()
        self._watcher: asyncio.Task[None] | None = None

    # --- public API ------------------------------------------------------------------------------

    async def ask(self, thread_id: str, text: str, *, user_id: str | None = None,
                  first_tool: str | None = None) -> RunOutcome:
        """A new message in a thread. If the thread's run is waiting for a person, the message answers it."""
        async with self._lease(thread_id):
            latest = await self._latest(thread_id)
            if latest is not None and latest.status in ("running", "stalled"):
                # We hold the lease, so the worker that ran it is gone: close it out first.
                crashed = await self._repair_crashed(latest) if latest.status == "running" else await self._open(latest)
                if not crashed.record.pending:
                    await crashed.fail("internal_error", "the worker running this turn stopped (restart)")
                latest = crashed.record
            if latest is not None and latest.status == "paused":
                run = await self._open(latest)
                for pending in list(run.record.pending):
                    await self._claim(pending, user_id or "user")
                    await run.resolve(pending, ReplyInstead(text), by=user_id or "user")
                run.count("resumed")
            else:
                now = time.time()
                record = RunRecord(run_id=uuid.uuid4().hex, thread_id=thread_id, user_id=user_id, text=preview(text),
                                   created_at=now, updated_at=now)
                run = Run(self.deps, record, await self.deps.store.load_transcript(thread_id), self._memo(thread_id))
                run.count("runs")
                run.emit(RunStarted, user_id=user_id, text=text)
            run.record.status = "running"
            run.append(UserMessage(content=text, user_id=user_id))
            await run.commit()
            return await self._drive(run, first_tool)

    async def resume(self, run_id: str, call_id: str, decision: Decision, *, by: str,
                     on_claimed: Callable[[], Awaitable[None]] | None = None) -> RunOutcome:
        """A person's answer to one paused call. Exactly one answer per question is ever applied.

        ``on_claimed`` runs as soon as this answer has won the claim, before the call executes
        (a front end uses it to show "Confirmed by …" at once)."""
        record = await self._load(run_id)
        pending = _find(record, call_id)
        if not isinstance(decision, Expire | CancelRun) and time.time() > pending.expires_at:
            raise InterruptExpired("this request expired")
        self._check_fits(pending, decision)
        await self._claim(pending, by)
        if on_claimed is not None:
            try:
                await on_claimed()
            except Exception:
                log.exception("on_claimed hook failed for run %s", run_id)
        try:
            return await self._apply(record.thread_id, run_id, pending, decision, by)
        except ThreadBusy:
            await self.deps.store.release_claim(pending.token)  # nothing happened: the question stays open
            raise

    async def _apply(self, thread_id: str, run_id: str, pending: PendingCall, decision: Decision,
                     by: str) -> RunOutcome:
        async with self._lease(thread_id):
            record = await self._load(run_id)
            current = next((p for p in record.pending if p.token == pending.token), None)
            if current is None:
                raise AlreadyHandled(by)
            run = await self._open(record)
            await run.resolve(current, decision, by=by)
            if not isinstance(decision, Expire | CancelRun):
                run.count("resumed")
            if run.record.pending:
                fresh = [p for p in run.record.pending if p.call.id == pending.call.id]
                if fresh:  # the same call asks again (values given, now it needs a confirmation)
                    return await run.pause(new=fresh)
                await run.commit()  # other questions of this batch are still open
                return run.outcome()
            if isinstance(decision, Expire):
                answer = f"_The request to run `{pending.call.name}` expired without an answer; nothing was run._"
                return await run.finish("interrupted", answer)
            run.record.status = "running"
            return await self._drive(run)

    async def resume_token(self, token: str, decision: Decision, *, by: str,
                           on_claimed: Callable[[], Awaitable[None]] | None = None) -> RunOutcome:
        found = await self.deps.store.resolve_token(token)
        if found is None:
            raise NotPending("unknown or expired request")
        return await self.resume(found[0], found[1], decision, by=by, on_claimed=on_claimed)

    async def cancel(self, run_id: str) -> RunOutcome | None:
        """Stop a run wherever it is; every call id already issued gets a result."""
        local = self._running.get(run_id)
        if local is not None:
            run, task = local
            run.cancel_requested = True
            task.cancel()
            return await asyncio.shield(task)
        record = await self._load(run_id)
        if record.status == "paused":
            async with self._lease(record.thread_id):
                run = await self._open(await self._load(run_id))
                if run.record.status == "paused":
                    return await run.cancel()
                return run.outcome()
        if record.status == "running":
            await self.deps.store.request_cancel(run_id)  # the instance running it polls for this
            return None
        return None

    async def expire_due(self, run_id: str, now: float | None = None) -> RunOutcome | None:
        """Answer every pending call whose time is up with ``expired``."""
        record = await self._load(run_id)
        outcome: RunOutcome | None = None
        for pending in record.pending:
            if pending.expires_at <= (now or time.time()):
                with contextlib.suppress(AlreadyHandled, NotPending):
                    outcome = await self.resume(run_id, pending.call.id, Expire(), by="expiry")
        return outcome

    async def repair(self, run_id: str) -> RunOutcome | None:
        """A worker died mid-run: answer what it left dangling (a started change → ``outcome_unknown``)
        and park the run as ``stalled`` until someone resumes it. None if its worker is still alive."""
        record = await self._load(run_id)
        try:
            async with self._lease(record.thread_id, wait=False):
                record = await self._load(run_id)
                if record.status != "running":
                    return None
                run = await self._repair_crashed(record, park=True)
                return run.outcome()
        except ThreadBusy:
            return None

    async def recover(self, run_id: str) -> RunOutcome:
        """Repair a run whose worker died (never re-running a started change) and carry on with it."""
        record = await self._load(run_id)
        async with self._lease(record.thread_id, wait=False):
            record = await self._load(run_id)
            if record.status in ("finished", "paused"):
                return Run(self.deps, record, []).outcome()
            run = await self._repair_crashed(record) if record.status == "running" else await self._open(record)
            if run.record.pending:
                return await run.pause()
            run.record.status = "running"
            return await self._drive(run)

    async def run_record(self, run_id: str) -> RunRecord:
        return await self._load(run_id)

    # --- the one broad boundary per run ----------------------------------------------------------

    async def _drive(self, run: Run, first_tool: str | None = None) -> RunOutcome:
        task = asyncio.create_task(self._drive_inner(run, first_tool), name=f"run-{run.id}")
        self._running[run.id] = (run, task)
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch_cancels(), name="cancel-watcher")
        try:
            return await task
        finally:
            self._running.pop(run.id, None)

    async def _drive_inner(self, run: Run, first_tool: str | None) -> RunOutcome:
        try:
            try:
                async with asyncio.timeout(run.remaining_s()):
                    return await react_loop(run, first_tool=first_tool)
            except TimeoutError:
                return await run.stop_early("timeout")
        except asyncio.CancelledError:
            if not run.cancel_requested:
                raise  # the process is going down: the lease lapses and recovery answers the calls
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            return await asyncio.shield(run.cancel())
        except ModelError as exc:
            log.warning("run %s: model error %s", run.id, exc)
            return await run.fail("model_error", exc.public)
        except StoreError:
            raise
        except Exception:
            ref = uuid.uuid4().hex[:8]
            log.exception("run %s failed with an internal error (ref %s)", run.id, ref)
            return await run.fail("internal_error", f"an internal error occurred (ref {ref})")

    async def _watch_cancels(self) -> None:
        """Another instance may ask, through the store, to cancel a run running here. One watcher per
        engine asks about all of its runs in one call, however many there are."""
        while self._running:
            await asyncio.sleep(self.options.cancel_poll_s)
            running = dict(self._running)
            if not running:
                return
            try:
                requested = await self.deps.store.cancel_requests(list(running))
            except StoreError:
                log.warning("could not poll for cancellations")
                continue
            for run_id in requested:
                run, task = running[run_id]
                if not task.done():
                    run.cancel_requested = True
                    task.cancel()

    # --- helpers ---------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _lease(self, thread_id: str, *, wait: bool = True) -> AsyncIterator[None]:
        """One turn at a time per thread; a crashed worker's lease lapses after ``lease_ttl_ms``."""
        store, ttl = self.deps.store, self.options.lease_ttl_ms
        owner = f"{self.instance}:{uuid.uuid4().hex[:8]}"
        deadline = time.monotonic() + (self.options.lease_wait_s if wait else 0)
        while not await store.acquire_lease(thread_id, owner, ttl):
            if time.monotonic() >= deadline:
                raise ThreadBusy("this thread is busy with another turn; try again in a moment")
            await asyncio.sleep(0.05)

        async def renew() -> None:
            while True:
                await asyncio.sleep(ttl / 3000)
                try:
                    if not await store.renew_lease(thread_id, owner, ttl):
                        log.error("lost the lease on thread %s", thread_id)
                        return
                except StoreError as exc:  # the run's own writes will fail loudly; keep trying meanwhile
                    log.warning("could not renew the lease on thread %s: %s", thread_id, exc)

        renewer = asyncio.create_task(renew())
        try:
            yield
        finally:
            renewer.cancel()
            with contextlib.suppress(StoreError):
                await asyncio.shield(store.release_lease(thread_id, owner))

    async def _load(self, run_id: str) -> RunRecord:
        record = await self.deps.store.load_run(run_id)
        if record is None:
            raise RunNotFound(f"run {run_id} not found (it may have expired)")
        return record

    async def _latest(self, thread_id: str) -> RunRecord | None:
        run_id = await self.deps.store.thread_run(thread_id)
        return await self.deps.store.load_run(run_id) if run_id else None

    async def _open(self, record: RunRecord) -> Run:
        transcript = await self.deps.store.load_transcript(record.thread_id)
        return Run(self.deps, record, transcript, self._memo(record.thread_id))

    def _memo(self, thread_id: str) -> ThreadMemo:
        memo = self._memos.pop(thread_id, None) or ThreadMemo([])
        self._memos[thread_id] = memo
        while len(self._memos) > 1024:
            self._memos.popitem(last=False)
        return memo

    async def _claim(self, pending: PendingCall, by: str) -> None:
        claim = await self.deps.store.claim(pending.token, by)
        if not claim.won:
            raise AlreadyHandled(claim.holder)

    def _check_fits(self, pending: PendingCall, decision: Decision) -> None:
        """Reject an answer that does not fit before anything is claimed, so the question stays open."""
        if isinstance(decision, Confirm) and pending.interrupt_type != "confirm_risky":
            raise InvalidDecision("this request asks for values, not a confirmation")
        if isinstance(decision, ProvideParams):
            if pending.interrupt_type != "params_required":
                raise InvalidDecision("this request asks for a confirmation, not values")
            asked = {f["name"]: f.get("choices") for f in pending.payload.get("fields", [])}
            for name, value in decision.values.items():
                if name not in asked:
                    raise InvalidDecision(f"invalid values: {name} was not asked for")
                if asked[name] and value not in asked[name]:
                    raise InvalidDecision(f"invalid values: {name} must be one of {', '.join(map(str, asked[name]))}")
            spec = self.deps.registry.get(pending.call.name)
            if spec is None:
                raise InvalidDecision(f"the tool {pending.call.name} is no longer available")
            try:
                spec.args_model.model_validate({**pending.arguments, **decision.values})
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                                     for e in exc.errors(include_url=False)[:5])
                raise InvalidDecision(f"invalid values: {problems}") from exc

    async def _repair_crashed(self, record: RunRecord, *, park: bool = False) -> Run:
        """Answer the calls a dead worker left behind. A started change is never re-run."""
        run = await self._open(record)
        journal = await self.deps.store.journal(record.run_id)
        unknown = "the worker stopped while this change ran; check its effect before retrying"
        for pending in list(run.record.pending):
            probe = await self.deps.store.claim(pending.token, "recovery")
            if probe.won or journal.get(pending.call.id) != "started":
                await self.deps.store.release_claim(pending.token)  # never ran: the question stays open
            else:
                run.record.pending.remove(pending)
                run.answer(pending.call, "error", "outcome_unknown", unknown)
        for call in run.dangling_calls():
            if journal.get(call.id) == "started":
                run.answer(call, "error", "outcome_unknown", unknown)
            else:
                run.answer(call, "cancelled", "interrupted_by_restart", "the worker stopped before this call ran")
        if run.record.pending:
            run.record.status = "paused"
        elif park:
            run.record.status = "stalled"
        await run.commit()
        return run


def _find(record: RunRecord, call_id: str) -> PendingCall:
    for pending in record.pending:
        if pending.call.id == call_id:
            return pending
    raise NotPending("this call is not waiting for an answer (it may have been handled already)")
