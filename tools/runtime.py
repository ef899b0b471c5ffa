"""Running tool calls: one call (``execute_one``) and one model turn's batch (``execute_batch``).

Nothing here raises for a tool's sake: every call id comes back as exactly one
:class:`Observation` — a result, or an interrupt that asks a person. The only
exception that escapes is :class:`asyncio.CancelledError`, which the run handles.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ValidationError

from core.messages import ToolCall, ToolResultMessage, error_result, ok_content
from tools.errors import Interrupt, InterruptType, ToolError
from tools.hygiene import clean, scrub_text
from tools.registry import Registry, ToolContext, ToolSpec

log = logging.getLogger(__name__)


class MutationJournal(Protocol):
    """Records a mutating call as started before it runs and finished after."""

    async def start(self, run_id: str, call_id: str) -> bool:
        """True if this is the first start of this call; False if it was started before."""

    async def finish(self, run_id: str, call_id: str, status: str) -> None: ...

    async def abandon(self, run_id: str, call_id: str) -> None:
        """The call stopped to ask a person before changing anything: it may start again later."""


@dataclass(frozen=True)
class InterruptRequest:
    interrupt_type: InterruptType
    reason: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class Observation:
    call: ToolCall
    result: ToolResultMessage | None
    interrupt: InterruptRequest | None = None
    latency_ms: float = 0.0
    arguments: dict[str, Any] = field(default_factory=dict)


def _validation_message(spec: ToolSpec, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        problems.append(f"{where}: {err['msg']}")
    return f"invalid arguments for {spec.name}: " + "; ".join(problems)


def _confirm_payload(spec: ToolSpec, args: dict[str, Any], stated_reason: str) -> dict[str, Any]:
    return {
        "tool": spec.name,
        "arguments": args,
        "environment": args.get("environment"),
        "target": args.get("service_id") or args.get("target") or args.get("name"),
        "description": spec.description.splitlines()[0],
        "model_reason": scrub_text(stated_reason)[:500],
    }


async def execute_one(
    call: ToolCall,
    *,
    registry: Registry,
    ctx: ToolContext,
    journal: MutationJournal,
    stated_reason: str = "",
    override_args: dict[str, Any] | None = None,
) -> Observation:
    """Validate, gate, run and classify one call. ``ctx.confirmed_by`` is set only by a resume."""
    started = time.perf_counter()

    def done(result: ToolResultMessage | None, **kw: Any) -> Observation:
        return Observation(call, result, latency_ms=(time.perf_counter() - started) * 1000, **kw)

    spec = registry.get(call.name)
    if spec is None:
        return done(error_result(call, "unknown_tool", f"there is no tool named {call.name!r}"))
    if call.raw_arguments is not None and override_args is None:
        return done(error_result(call, "validation_error", "the arguments were not a valid JSON object"))
    try:
        args = spec.args_model.model_validate(override_args if override_args is not None else call.arguments)
    except ValidationError as exc:
        return done(error_result(call, "validation_error", _validation_message(spec, exc)))
    plain_args = args.model_dump(mode="json")

    # The gate: code, not the prompt, decides. Only a person's confirmation (set by resume) opens it.
    if spec.mutating and ctx.confirmed_by is None and spec.needs_confirmation(args):
        reason = f"{spec.name} changes {plain_args.get('environment') or 'a system'}: a person must confirm"
        request = InterruptRequest("confirm_risky", reason, _confirm_payload(spec, plain_args, stated_reason))
        return done(None, interrupt=request, arguments=plain_args)

    if spec.mutating and not await journal.start(ctx.run_id, call.id):
        message = f"{spec.name} was started before and may or may not have completed; check before retrying"
        return done(error_result(call, "outcome_unknown", message), arguments=plain_args)

    status = "error"
    try:
        async with asyncio.timeout(spec.timeout_s):
            data = await spec.func(args, ctx)
        status = "ok"
        content = ok_content(clean(data, spec.max_result_chars))
        return done(ToolResultMessage(call_id=call.id, name=call.name, content=content), arguments=plain_args)
    except Interrupt as intr:
        status = "interrupted"
        if spec.mutating:
            await journal.abandon(ctx.run_id, call.id)  # tools ask before they change anything
        request = InterruptRequest(intr.interrupt_type, scrub_text(intr.reason), intr.payload)
        return done(None, interrupt=request, arguments=plain_args)
    except ToolError as exc:
        return done(error_result(call, exc.code, scrub_text(exc.message)), arguments=plain_args)
    except asyncio.CancelledError:
        status = "cancelled"  # a cancelled change stays "started": its outcome is genuinely unknown
        raise
    except TimeoutError:
        message = f"{spec.name} did not answer within {spec.timeout_s:g}s"
        return done(error_result(call, "timeout", message), arguments=plain_args)
    except Exception:
        ref = uuid.uuid4().hex[:8]
        log.exception("tool %s failed (call %s, run %s, ref %s)", spec.name, call.id, ctx.run_id, ref)
        message = f"{spec.name} failed with an internal error (ref {ref})"
        return done(error_result(call, "internal_error", message), arguments=plain_args)
    finally:
        if spec.mutating and status not in ("interrupted", "cancelled"):
            await journal.finish(ctx.run_id, call.id, status)


OnObservation = Callable[[Observation], Awaitable[None]]


async def execute_batch(
    calls: Sequence[ToolCall],
    *,
    registry: Registry,
    make_ctx: Callable[[ToolCall], ToolContext],
    journal: MutationJournal,
    allowed: Collection[str] | None = None,
    stated_reason: str = "",
    on_observation: OnObservation | None = None,
) -> list[Observation]:
    """Run one model turn's calls; return one observation per call, in call order.

    Read-only calls run concurrently and the batch waits for all of them. At most one
    mutating call runs, after them; further mutating calls are answered, not run.
    With ``allowed`` (a serial step), calls to any other tool are answered, not run.
    """
    observations: dict[str, Observation] = {}

    async def record(obs: Observation) -> None:
        observations[obs.call.id] = obs
        if on_observation is not None:
            await on_observation(obs)

    async def run(call: ToolCall) -> None:
        await record(await execute_one(
            call, registry=registry, ctx=make_ctx(call), journal=journal, stated_reason=stated_reason,
        ))

    parallel: list[ToolCall] = []
    write: ToolCall | None = None
    for call in calls:
        spec = registry.get(call.name)
        if allowed is not None and call.name not in allowed:
            only = ", ".join(sorted(allowed))
            await record(Observation(call, error_result(
                call, "skipped_in_serial_step", f"only {only} may run in this step; this call did not run",
                status="skipped")))
        elif spec is not None and spec.mutating:
            if write is None:
                write = call
            else:
                await record(Observation(call, error_result(
                    call, "deferred_one_write_per_step",
                    f"only one change runs per step; {write.name} ran first. Ask again for this one.",
                    status="skipped")))
        else:
            parallel.append(call)

    await asyncio.gather(*(run(c) for c in parallel))
    if write is not None:
        await run(write)
    return [observations[c.id] for c in calls]
