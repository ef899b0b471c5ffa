"""rollback_service and scale_service: changes behind the same gate as restart_service (mutating, confirmed in
prod, approvers and the two-person rule by tool name, journaled exactly once), never run in an alert's run, each
with a plan — from → to, read before the card and refused there when it cannot or need not be done — and, when
the person confirms, checked against what they saw before anything changes."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core.envs import environment_name
from core.figures import percent, shown
from tools.ops import toolbox_config as cfg
from tools.ops.catalog import Service
from tools.ops.metric_backends import MetricsBackend, Reading
from tools.ops.restart import Rollout, followed
from tools.ops.rollback import ChangeRequest, Plan, RollbackBackend, ScaleBackend, drift
from tools.registry import ToolContext, ToolSpec, always, tool
from tools.tool_errors import Conflict, InvalidArguments, NotFound, Refused, ToolError

Resolve = Callable[[str, str | None, str], tuple[Service, str]]
"""(service_id, environment, what) → the catalog's service and the environment, or asks for what is missing."""


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RollbackArgs(_Args):
    service_id: str = Field(min_length=1, description="the service id from search_resource")
    environment: str | None = Field(None, description="where to roll back")
    # strict: true, "6" or 6.5 is a confused call, not revision 1 or 6 (a card for a change nobody meant)
    to_revision: int | None = Field(None, ge=1, strict=True, description="the Kubernetes revision to go back to "
                                    "(recent_changes: 'revision 5'); default: the previous one")
    to_release: str | None = Field(None, min_length=1, max_length=200,
                                   description="or the release to go back to, as recent_changes shows it: a "
                                   "version (2026.12.01-4), an image (orders-api:4.1.9) or its tag")
    reason: str = Field("", max_length=500, description="why, in one sentence")


class ScaleArgs(_Args):
    service_id: str = Field(min_length=1, description="the service id from search_resource")
    environment: str | None = Field(None, description="where to scale")
    replicas: int = Field(ge=0, le=1000, strict=True, description="the number of replicas wanted")
    reason: str = Field("", max_length=500, description="why, in one sentence")


def bounds_for(bounds: dict[str, dict[str, cfg.Bounds]], service: str, environment: str) -> cfg.Bounds | None:
    """The most specific entry: the service's in the environment, its any-environment one, then '*'."""
    env = environment_name(environment) or environment  # the bounds' names are folded at load; so is this one
    for s in (service, "*"):
        for e in (env, "*"):
            if (found := (bounds.get(s) or {}).get(e)) is not None:
                return found
    return None


def within(bounds: dict[str, dict[str, cfg.Bounds]], service: str, environment: str, replicas: int) -> None:
    found = bounds_for(bounds, service, environment)
    if found is None:
        raise Refused(f"no replica bounds are configured for {service} in {environment} "
                      "(toolbox.scale_bounds): it cannot be scaled from here", code="out_of_bounds")
    if not found.min <= replicas <= found.max:
        raise Refused(f"{replicas} replicas is outside the bounds for {service} in {environment}: "
                      f"{found.min} to {found.max} (toolbox.scale_bounds)", code="out_of_bounds")


@dataclass
class Changing:
    """What the two tools need from the toolbox."""

    resolve: Resolve
    named: Callable[[Any], None]
    metrics: MetricsBackend
    rollbacks: RollbackBackend
    scaling: ScaleBackend
    verify: cfg.Verification
    bounds: dict[str, dict[str, cfg.Bounds]]

    def where(self, service_id: str, environment: str | None, what: str) -> tuple[Service, str]:
        if environment is None:  # a plan cannot ask (the tool asks when it runs)
            raise InvalidArguments(f"name the environment to {what}")
        return self.resolve(service_id, environment, what)

    async def planned(self, plan: Callable[[], Any], req: ChangeRequest, ctx: ToolContext) -> Plan:
        """The plan read now. Confirmed on a card, a plan that no longer can be made (the revision gone, nothing
        left to change: another card ran first) is the service having changed since the card, said as such."""
        try:
            return await plan()  # type: ignore[no-any-return]
        except (NotFound, Refused) as exc:
            if ctx.plan is None:
                raise
            raise Conflict(f"{req.service.id} {req.environment} changed after the card was shown ({exc.message}); "
                           "nothing was changed — ask again to see what a change would do now") from exc

    async def finish(self, plan: Plan, req: ChangeRequest, ctx: ToolContext, backend: RollbackBackend | ScaleBackend,
                     act: Callable[[], Any], what: tuple[str, str]) -> dict[str, Any]:
        """Check the plan against the card, act, wait for the rollout, compare the error rate."""
        if ctx.plan is not None and (moved := drift(ctx.plan, plan)) is not None:
            raise Conflict(f"{req.service.id} {req.environment} changed after the card was shown ({moved}); "
                           "nothing was changed — ask again to see what a change would do now")
        before = await error_rate(self.metrics, req.service, req.environment)
        action = await act()
        rollout = await followed(backend.wait(req, action, self.verify.timeout_s, self.verify.poll_s))
        after: float | str | None = None
        if rollout.status == "complete":
            if backend.settles and self.verify.settle_s:
                await asyncio.sleep(self.verify.settle_s)
            after = await error_rate(self.metrics, req.service, req.environment)
        return {"service_id": req.service.id, "environment": req.environment, "backend": backend.name,
                "summary": plan.summary, "from": plan.side("from"), "to": plan.side("to"), "action": action,
                "rollout": rollout.status, "rollout_detail": rollout.detail, "waited_s": rollout.waited_s,
                "error_rate_before": before, "error_rate_after": after,
                **({"error_rate_warnings": w} if (w := warnings_of(before, after)) else {}),
                "verdict": verdict(what, rollout, before, after), "confirmed_by": ctx.confirmed_by}

    def specs(self) -> list[ToolSpec]:
        timeout = self.verify.budget_s

        def request(args: RollbackArgs | ScaleArgs, ctx: ToolContext, service: Service, env: str) -> ChangeRequest:
            if isinstance(args, ScaleArgs):
                return ChangeRequest(service, env, ctx.idempotency_key, ctx.user_id, ctx.confirmed_by, args.reason,
                                     replicas=args.replicas)
            return ChangeRequest(service, env, ctx.idempotency_key, ctx.user_id, ctx.confirmed_by, args.reason,
                                 to_revision=args.to_revision, to_release=args.to_release)

        async def rollback_plan(args: RollbackArgs, ctx: ToolContext) -> dict[str, Any]:
            service, env = self.where(args.service_id, args.environment, f"roll back {args.service_id}")
            return (await self.rollbacks.plan_rollback(request(args, ctx, service, env))).view()

        def rollback_check(args: RollbackArgs) -> None:
            self.named(args)
            if args.to_revision is not None and args.to_release is not None:
                raise InvalidArguments("name to_revision or to_release, not both")

        @tool(mutating=True, confirm=always, check=rollback_check, plan=rollback_plan,
              attended_only=True, timeout_s=timeout)
        async def rollback_service(args: RollbackArgs, ctx: ToolContext) -> dict[str, Any]:
            """Roll a service's deployment in one environment back to the previous revision, or to a named one
            (to_revision, or to_release as recent_changes shows it), as `kubectl rollout undo` does; then wait
            for the rollout and compare the error rate before and after. Changes production state: a person
            confirms it on a card showing from → to (revision, images, change cause, when each was deployed).
            Refused when the revision no longer exists, the rollout is paused, or nothing would change. Only
            when a person asks for it; never in an alert's run."""
            service, env = self.resolve(args.service_id, args.environment, f"roll back {args.service_id}")
            req = request(args, ctx, service, env)
            plan = await self.planned(lambda: self.rollbacks.plan_rollback(req), req, ctx)
            return await self.finish(plan, req, ctx, self.rollbacks, lambda: self.rollbacks.rollback(req, plan),
                                     ("rollback", "rolled back"))

        async def scale_plan(args: ScaleArgs, ctx: ToolContext) -> dict[str, Any]:
            service, env = self.where(args.service_id, args.environment, f"scale {args.service_id}")
            return (await self.scaling.plan_scale(request(args, ctx, service, env))).view()

        def scale_check(args: ScaleArgs) -> None:
            self.named(args)
            if args.environment is not None:  # out of bounds: refused before any card
                within(self.bounds, args.service_id, args.environment, args.replicas)

        @tool(mutating=True, confirm=always, check=scale_check, plan=scale_plan, attended_only=True,
              timeout_s=timeout)
        async def scale_service(args: ScaleArgs, ctx: ToolContext) -> dict[str, Any]:
            """Set the number of replicas of a service's deployment in one environment, within the bounds the
            operator configured for it (outside them: refused, with the bounds); then wait for the rollout and
            compare the error rate before and after. Changes production state: a person confirms it on a card
            showing current → new replicas. Only when a person asks for it; never in an alert's run."""
            service, env = self.resolve(args.service_id, args.environment, f"scale {args.service_id}")
            within(self.bounds, service.id, env, args.replicas)
            req = request(args, ctx, service, env)
            plan = await self.planned(lambda: self.scaling.plan_scale(req), req, ctx)
            return await self.finish(plan, req, ctx, self.scaling, lambda: self.scaling.scale(req, plan),
                                     ("scaling", "scaled"))

        return [rollback_service, scale_service]


async def error_rate(metrics: MetricsBackend, service: Service, env: str) -> float | str | None:
    """The symptom to re-check; a failure to read it is reported, not fatal to the change. A value read from
    partial data keeps its backend's warnings (:class:`Reading`)."""
    if "error_rate" not in metrics.names:
        return None
    try:
        value = await metrics.current(service, env, "error_rate")
    except ToolError as exc:
        return f"unavailable: {exc.message}"
    if value is None:
        return None
    if not math.isfinite(value):  # 0/0 with no traffic (NaN): no rate, never "nan%"
        return "unavailable: no requests to compute it from"
    if not 0 <= value <= 1:  # a percentage (5 for 5%) would read as 500%
        return (f"unavailable: the error_rate query returned {value:g}, not a ratio between 0 and 1 "
                "(toolbox.metrics.queries.error_rate must divide errors by requests, not give a percentage)")
    rounded = Reading(round(value, 4))
    rounded.warnings = tuple(getattr(value, "warnings", ()))
    return rounded


def warnings_of(*rates: float | str | None) -> list[str]:
    """What the backend warned about the error rates read (partial data), each once."""
    return list(dict.fromkeys(w for r in rates for w in getattr(r, "warnings", ())))


def verdict(what: tuple[str, str], rollout: Rollout, before: float | str | None,
            after: float | str | None) -> str:
    """A change's verdict (``what``: ("restart", "restarted"), ("rollback", "rolled back"), ("scaling",
    "scaled"))."""
    noun, done = what
    if rollout.status == "timed_out":
        return f"{noun} issued, but the rollout did not finish: it is NOT verified"
    if rollout.status == "failed":
        return f"{noun} issued, but the job failed"
    if rollout.status == "unknown":
        return f"{noun} issued; its progress could not be followed"
    if rollout.status == "superseded":
        return f"{noun} issued and rolled out, but the Deployment no longer matches it: {rollout.detail}"
    if isinstance(before, float) and isinstance(after, float):
        warned = warnings_of(before, after)
        partial = f" (from partial data, Prometheus warned: {warned[0]}; not a sure comparison)" if warned else ""
        if shown(before) == shown(after):  # as written: "stayed" never beside two figures that differ
            return f"{done}; the error rate stayed at {percent(after)}{partial}"
        trend = "fell" if after < before else "rose"
        return f"{done}; the error rate {trend} from {percent(before)} to {percent(after)}{partial}"
    return f"{done}; the error rate could not be compared"
