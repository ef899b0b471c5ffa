"""Rollbacks and scaling planned from the change history rather than a cluster: the webhook backend (a CI/CD
job does the change) and the in-memory demo."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tools.ops.changes import Change, DemoMade, NotConfigured
from tools.ops.http import Http
from tools.ops.restart import Rollout, follow_job, job_answer
from tools.ops.rollback import ChangeRequest, History, Plan, line, names, text
from tools.ops.series import iso
from tools.ops.verdict import SAME_DEPLOY_S
from tools.tool_errors import InvalidArguments, NotFound, Refused, ToolError


def _same_deploy(a: Change, b: Change) -> bool:
    """The same deploy recorded by two sources: seconds apart, the same images (equal images alone are no proof: a
    config change keeps the images of the deploy before it)."""
    return a.source != b.source and abs(a.at - b.at) <= SAME_DEPLOY_S and bool(a.images) and \
        sorted(a.images) == sorted(b.images)


def release_plan(req: ChangeRequest, releases: list[Change], current: Change | None,
                 open_ended: bool = False) -> Plan:
    """A rollback planned from the change history (the webhook's and the demo's): from the release running now
    (``current``, else the newest) to the named one or the one before it. ``open_ended``: a target the history
    does not know is still sent (a CI/CD job knows releases this history may lack)."""
    where = f"{req.service.id} {req.environment}"
    current = current or (releases[-1] if releases else None)
    wanted = req.to_release.strip() if req.to_release else None
    if wanted is None and req.to_revision is not None:
        wanted = f"revision {req.to_revision}"
    target: Change | None = None
    if wanted is not None:
        target = next((r for r in reversed(releases) if names(wanted, list(r.images), r.version)), None)
        if target is None and not open_ended:
            known = ", ".join(r.version or "?" for r in releases) or "none"
            raise NotFound(f"the change history of {where} has no release {wanted!r} (known: {known})")
    elif current is not None:
        before = [r for r in releases if r.at < current.at and r.version != current.version]
        target = before[-1] if before else None
    if target is None and wanted is None:
        raise NotFound(f"the change history of {where} shows no release before the current one: name the release "
                       "to roll back to (to_release)")
    to_version = target.version if target else wanted
    if current is not None and to_version == current.version:
        raise Refused(f"{where} runs {to_version} already: a rollback to it would change nothing", code="no_change")
    cur_images = list(current.images) if current else None
    to_images = list(target.images) if target else None
    if current is not None and target is not None and _same_deploy(current, target):  # one deploy, two names
        raise Refused(f"{where} runs the images of {to_version} already ({', '.join(current.images)}): a rollback "
                      "to it would change nothing", code="no_change")
    changes = [line("release", current.version if current else None, to_version),
               line("images", cur_images, to_images),
               line("change_cause", current.description if current else None, target.description if target else None),
               line("deployed_at", iso(current.at) if current else None, iso(target.at) if target else None)]
    summary = (f"{where}: {text(current.version if current else None)} ({text(cur_images)}) → "
               f"{to_version} ({text(to_images)})")
    return Plan(changes, summary, {"release": to_version, "images": to_images or [],
                                   "description": target.description if target else None,
                                   "at": target.at if target else None})


class WebhookActions:
    """POST the rollback or scaling to a URL (a CI/CD job), shaped like the restart webhook's request; if it
    answers with a ``status_url``, poll it. The idempotency key (run id and call id) lets the job run it once."""

    name = "webhook"
    settles = True

    def __init__(self, http: Http, url: str, history: History) -> None:
        self.http, self.url, self.history = http, url, history

    async def plan_rollback(self, req: ChangeRequest) -> Plan:
        releases = await self.history(req.service, req.environment)
        if req.to_release is None and req.to_revision is None and not releases:
            raise InvalidArguments("no change history to find the previous release in: name the release to roll "
                                   "back to (to_release)")
        return release_plan(req, releases, None, open_ended=True)

    async def plan_scale(self, req: ChangeRequest) -> Plan:
        return Plan([line("replicas", None, req.replicas)],
                    f"{req.service.id} {req.environment}: → {req.replicas} replicas", {})

    async def _post(self, req: ChangeRequest, action: str, extra: dict[str, Any]) -> dict[str, Any]:
        k = req.service.kubernetes
        body = await self.http.request("POST", self.url, body={
            "action": action, "service_id": req.service.id, "environment": req.environment,
            "namespace": k.namespace if k else None, "deployment": k.deployment if k else None,
            "idempotency_key": req.idempotency_key, "requested_by": req.requested_by,
            "confirmed_by": req.confirmed_by, "reason": req.reason, **extra})
        return job_answer(self.url, body)

    async def rollback(self, req: ChangeRequest, plan: Plan) -> dict[str, Any]:
        return await self._post(req, "rollback", {"to_release": plan.target["release"],
                                                  "to_revision": req.to_revision,
                                                  "from_release": plan.side("from").get("release")})

    async def scale(self, req: ChangeRequest, plan: Plan) -> dict[str, Any]:
        return await self._post(req, "scale", {"replicas": req.replicas})

    async def wait(self, req: ChangeRequest, action: dict[str, Any], timeout_s: float, poll_s: float) -> Rollout:
        return await follow_job(self.http, action, timeout_s, poll_s)


@dataclass
class DemoActions:
    """In memory: rolls back among the demo's releases (its change history) and remembers what it did, once per
    idempotency key (tests count executions); the rollout completes at once."""

    history: History
    name: str = "demo"
    settles: bool = False
    default_replicas: int = 3
    done: list[dict[str, Any]] = field(default_factory=list)
    running: dict[tuple[str, str], Change] = field(default_factory=dict)
    """What a demo rollback left running, by (service, environment)."""
    replicas: dict[tuple[str, str], int] = field(default_factory=dict)

    planned: dict[str, Plan] = field(default_factory=dict)
    """The plan each idempotency key was carried out with: asked again, the same call gets the same answer."""
    made: DemoMade | None = None
    """Where what it did shows in the change history."""

    async def plan_rollback(self, req: ChangeRequest) -> Plan:
        if req.idempotency_key in self.planned:
            return self.planned[req.idempotency_key]
        releases = await self.history(req.service, req.environment)
        return release_plan(req, releases, self.running.get((req.service.id, req.environment)))

    async def plan_scale(self, req: ChangeRequest) -> Plan:
        if req.idempotency_key in self.planned:
            return self.planned[req.idempotency_key]
        now = self.replicas.get((req.service.id, req.environment), self.default_replicas)
        if now == req.replicas:
            raise Refused(f"{req.service.id} {req.environment} runs {now} replicas already", code="no_change")
        return Plan([line("replicas", now, req.replicas)],
                    f"{req.service.id} {req.environment}: {now} → {req.replicas} replicas", {})

    def _once(self, req: ChangeRequest) -> dict[str, Any] | None:
        return next((r for r in self.done if r["idempotency_key"] == req.idempotency_key), None)

    def _record(self, req: ChangeRequest, plan: Plan, action: str, **what: Any) -> dict[str, Any]:
        self.planned[req.idempotency_key] = plan
        record = {"action": action, "service_id": req.service.id, "environment": req.environment,
                  "at": datetime.now(UTC).isoformat(timespec="seconds"), "idempotency_key": req.idempotency_key,
                  **what}
        self.done.append(record)
        return record

    async def rollback(self, req: ChangeRequest, plan: Plan) -> dict[str, Any]:
        if (record := self._once(req)) is not None:
            return record
        await asyncio.sleep(0)
        t = plan.target
        self.running[(req.service.id, req.environment)] = Change(
            at=float(t["at"] or 0.0), kind="deploy", source="demo", version=t["release"],
            images=tuple(t["images"]), description=t["description"])
        was = plan.side("from").get("release")
        if self.made is not None:
            self.made.add(req.service.id, req.environment, "rollback", version=t["release"], from_version=was,
                          to_version=t["release"], description=f"rolled back to {t['release']}")
        return self._record(req, plan, "rollback", from_release=was, to_release=t["release"])

    async def scale(self, req: ChangeRequest, plan: Plan) -> dict[str, Any]:
        if (record := self._once(req)) is not None:
            return record
        assert req.replicas is not None
        was = self.replicas.get((req.service.id, req.environment), self.default_replicas)
        self.replicas[(req.service.id, req.environment)] = req.replicas
        if self.made is not None:
            self.made.add(req.service.id, req.environment, "scale", from_version=str(was),
                          to_version=str(req.replicas), description=f"scaled to {req.replicas} replicas")
        return self._record(req, plan, "scale", replicas=req.replicas)

    async def wait(self, req: ChangeRequest, action: dict[str, Any], timeout_s: float, poll_s: float) -> Rollout:
        return Rollout("complete", "demo rollout finished at once")


class Unconfigured:
    """Rollbacks or scaling with no backend for them (a restart webhook cannot be assumed to do them): refused
    before any card."""

    name = "none"
    settles = False

    def __init__(self, what: str) -> None:
        self.what = what

    def _refuse(self) -> ToolError:
        return NotConfigured(f"no backend is configured for {self.what}: set toolbox.{self.what} in the config")

    async def plan_rollback(self, req: ChangeRequest) -> Plan:
        raise self._refuse()

    async def plan_scale(self, req: ChangeRequest) -> Plan:
        raise self._refuse()

    async def rollback(self, req: ChangeRequest, plan: Plan) -> dict[str, Any]:
        raise self._refuse()

    async def scale(self, req: ChangeRequest, plan: Plan) -> dict[str, Any]:
        raise self._refuse()

    async def wait(self, req: ChangeRequest, action: dict[str, Any], timeout_s: float, poll_s: float) -> Rollout:
        return Rollout("unknown", "no backend")
