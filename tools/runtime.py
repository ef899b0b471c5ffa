"""Running tool calls: one call (``execute_one``) and one batch (``execute_batch``).

Nothing here raises for a tool's sake: every call id comes back as exactly one
:class:`Observation` — a result, or an interrupt that asks a person. The only
exception that escapes is :class:`asyncio.CancelledError`, which the run handles.

A person's answer to an interrupt is an input to the same path (as pydantic-ai passes
``ToolApproved`` / ``ToolDenied``): :class:`Approved` runs the call with the arguments the
person saw or filled in, :class:`Denied` answers it without running anything.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pydantic import ValidationError

from core.envs import environment_name
from core.messages import ResultStatus, ToolCall, ToolResultMessage, error_result, ok_content
from tools.hygiene import clean, scrub_text
from tools.registry import InEnvironments, Registry, ToolContext, ToolSpec
from tools.tool_errors import Interrupt, InterruptType, ToolError

log = logging.getLogger(__name__)


class MutationJournal(Protocol):
    """Records a mutating call as started before it runs and finished after."""

    async def start(self, run_id: str, call_id: str, arguments: Mapping[str, Any] | None = None) -> bool:
        """True if this is the first start of this call (with what it runs with); False if it was started before."""

    async def finish(self, run_id: str, call_id: str, status: str,
                     arguments: Mapping[str, Any] | None = None) -> None: ...

    async def abandon(self, run_id: str, call_id: str) -> None:
        """The call stopped to ask a person before changing anything: it may start again later."""


@dataclass(frozen=True)
class Approved:
    """Run the call with ``arguments``: the stored ones a person confirmed (``confirmed_by`` set, which opens
    the gate), or the stored ones merged with values a person supplied (the gate still applies)."""

    arguments: dict[str, Any]
    confirmed_by: str | None = None
    plan: dict[str, Any] | None = None
    """What the card showed (``ToolSpec.plan``), handed to the tool as ``ToolContext.plan``."""


@dataclass(frozen=True)
class Denied:
    """Answer the call without running it: declined, replied instead, expired, cancelled."""

    code: str
    message: str
    status: ResultStatus = "error"
    arguments: dict[str, Any] = field(default_factory=dict)
    """The call's arguments as they stood (a form's values merged in): what was not run, as the audit says it."""


ToolDecision = Approved | Denied


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


@dataclass(frozen=True)
class Batch:
    """One observation per call, in call order, and the interrupts among them (what makes a run pause)."""

    observations: list[Observation]

    @property
    def interrupts(self) -> list[Observation]:
        return [o for o in self.observations if o.interrupt is not None]


def _validation_message(spec: ToolSpec, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        problems.append(f"{where}: {err['msg']}")
    return f"invalid arguments for {spec.name}: " + "; ".join(problems)


def _environment_problem(spec: ToolSpec, args: dict[str, Any]) -> str | None:
    """An environment with spaces around it (``"prod "``) or a hidden or look-alike character (a Cyrillic ``р``)
    is refused before the gate, for our tools and MCP tools alike: a server that trims would run in prod what a
    rule judged as somewhere else. Case is left to the rules, which all fold it (:mod:`core.envs`)."""
    policy = spec.needs_confirmation
    if isinstance(policy, InEnvironments) and policy.required and not args.get(policy.field):
        return (f"{policy.field} is required for {spec.name}: who may confirm it depends on where it runs, and its "
                "server would choose one itself — name it")
    for name in spec.environment_fields():
        value = args.get(name)
        if not isinstance(value, str) or not value:
            continue
        normal = environment_name(value)
        if normal is None:  # shown as \u… escapes, never raw
            return f"{name} {value!a} holds characters no environment name has (plain ASCII only)"
        if value != value.strip():
            return f"{name} {value!a} has spaces around it: write {value.strip()!r}"
    return None


def _confirm_payload(spec: ToolSpec, args: dict[str, Any], stated_reason: str) -> dict[str, Any]:
    return {
        "tool": spec.name,
        "arguments": args,
        "environment": spec.environment_of(args),
        "target": args.get("service_id") or args.get("target") or args.get("name"),
        "description": spec.description.splitlines()[0] if spec.description else spec.name,
        "provenance": spec.provenance,
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
    problem = _environment_problem(spec, plain_args) if spec.mutating else None
    if problem:
        return done(error_result(call, "invalid_environment", problem))
    if spec.check is not None:
        try:
            spec.check(args)  # what the arguments name must exist before a person is asked to confirm it
        except ToolError as exc:
            return done(error_result(call, exc.code, scrub_text(exc.message)))

    if spec.attended_only and ctx.unattended:
        return done(error_result(call, "not_allowed", f"{spec.name} never runs in a run no person started (an "
                                 "alert's): a person asks for it in the thread"), arguments=plain_args)

    # The gate: code, not the prompt, decides. Only a person's confirmation (set by resume) opens it.
    if spec.mutating and ctx.confirmed_by is None and (ctx.unattended or spec.needs_confirmation(args)):
        payload = _confirm_payload(spec, plain_args, stated_reason)
        if spec.plan is not None:  # what exactly will change, read before anyone is asked (or a refusal)
            try:
                async with asyncio.timeout(spec.timeout_s):
                    payload["plan"] = await spec.plan(args, ctx)
            except ToolError as exc:
                return done(error_result(call, exc.code, scrub_text(exc.message)), arguments=plain_args)
            except TimeoutError:
                return done(error_result(call, "timeout", f"{spec.name} could not read what it would change "
                                         f"within {spec.timeout_s:g}s"), arguments=plain_args)
        reason = f"{spec.name} changes {plain_args.get('environment') or 'a system'}: a person must confirm"
        request = InterruptRequest("confirm_risky", reason, payload)
        return done(None, interrupt=request, arguments=plain_args)

    if spec.mutating and not await journal.start(ctx.run_id, call.id, plain_args):
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
        if spec.mutating:  # started (journaled), then cut off: it may have been carried out
            message = (f"{spec.name} did not finish within {spec.timeout_s:g}s after it started: it may or may not "
                       "have completed; check its effect before retrying")
            return done(error_result(call, "outcome_unknown", message), arguments=plain_args)
        message = f"{spec.name} did not answer within {spec.timeout_s:g}s"
        return done(error_result(call, "timeout", message), arguments=plain_args)
    except Exception:
        ref = uuid.uuid4().hex[:8]
        log.exception("tool %s failed (call %s, run %s, ref %s)", spec.name, call.id, ctx.run_id, ref)
        message = f"{spec.name} failed with an internal error (ref {ref})"
        return done(error_result(call, "internal_error", message), arguments=plain_args)
    finally:
        if spec.mutating and status not in ("interrupted", "cancelled"):
            await journal.finish(ctx.run_id, call.id, status, plain_args)


OnObservation = Callable[[Observation], None]


async def execute_batch(
    calls: Sequence[ToolCall],
    *,
    registry: Registry,
    make_ctx: Callable[[ToolCall, str | None], ToolContext],
    journal: MutationJournal,
    decisions: Mapping[str, ToolDecision] | None = None,
    stated_reason: str = "",
    on_observation: OnObservation | None = None,
) -> Batch:
    """Run a batch: a model turn's calls, or calls a person has just decided (``decisions`` by call id).

    Read-only calls run concurrently and the batch waits for all of them. At most one
    mutating call runs, after them; further mutating calls are answered, not run.
    """
    decisions = decisions or {}
    observations: dict[str, Observation] = {}

    def record(obs: Observation) -> None:
        observations[obs.call.id] = obs
        if on_observation is not None:
            on_observation(obs)

    async def run(call: ToolCall) -> None:
        decision = decisions.get(call.id)
        if isinstance(decision, Approved):
            ctx = make_ctx(call, decision.confirmed_by)
            if decision.plan is not None:
                ctx = replace(ctx, plan=decision.plan)
            record(await execute_one(call, registry=registry, ctx=ctx, journal=journal,
                                     override_args=decision.arguments))
        else:
            record(await execute_one(call, registry=registry, ctx=make_ctx(call, None), journal=journal,
                                     stated_reason=stated_reason))

    parallel: list[ToolCall] = []
    write: ToolCall | None = None
    for call in calls:
        spec = registry.get(call.name)
        decision = decisions.get(call.id)
        if isinstance(decision, Denied):
            record(Observation(call, error_result(call, decision.code, decision.message, status=decision.status),
                               arguments=decision.arguments))
        elif spec is not None and spec.mutating:
            if write is None:
                write = call
            else:
                record(Observation(call, error_result(
                    call, "deferred_one_write_per_step",
                    f"only one change per step; {write.name} was taken first (it runs, or waits for a person, "
                    "in this step). Ask again for this one once it is settled.",
                    status="skipped")))
        else:
            parallel.append(call)

    await asyncio.gather(*(run(c) for c in parallel))
    if write is not None:
        await run(write)
    return Batch([observations[c.id] for c in calls])
