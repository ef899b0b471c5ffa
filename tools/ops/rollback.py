"""rollback_service and scale_service backends: Kubernetes (what ``kubectl rollout undo`` and ``kubectl scale``
do, through the API server), a webhook (a CI/CD job) and an in-memory demo (those two: tools/ops/releases.py).

Each first *plans* (reads, never changes): from → to, shown on the confirmation card, or a refusal before any
card (the revision is gone, the rollout is paused, nothing would change). The change itself is made from a plan
read again when the person confirms; the Kubernetes patches carry a JSON patch ``test`` op, so a deployment
changed between that read and the write is refused by the API server, not overwritten."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tools.ops.catalog import Service
from tools.ops.changes import Change, timestamp
from tools.ops.kube import KubeClient
from tools.ops.restart import Rollout, watch_rollout
from tools.ops.rollouts import differences, images_of, template
from tools.ops.series import iso
from tools.tool_errors import Conflict, InvalidArguments, NotFound, Refused

_REVISION = "deployment.kubernetes.io/revision"
_CAUSE = "kubernetes.io/change-cause"
_UNKNOWN = "unknown"
_HISTORY = "deployment.kubernetes.io/revision-history"
History = Callable[[Service, str], Awaitable[list[Change]]]
"""A service's releases in one environment from the change history, oldest first."""


@dataclass(frozen=True)
class ChangeRequest:
    service: Service
    environment: str
    idempotency_key: str
    requested_by: str | None
    confirmed_by: str | None
    reason: str = ""
    to_revision: int | None = None
    to_release: str | None = None
    replicas: int | None = None


@dataclass(frozen=True)
class Plan:
    """What a change will do. ``changes`` and ``summary`` are what the card shows (``view``); ``target`` is what
    the backend needs to do it, never shown."""

    changes: list[dict[str, str]]
    summary: str
    target: dict[str, Any] = field(default_factory=dict)

    def view(self) -> dict[str, Any]:
        return {"changes": [dict(c) for c in self.changes], "summary": self.summary}

    def side(self, which: str) -> dict[str, str]:
        return {c["field"]: c[which] for c in self.changes}


def line(name: str, before: Any, after: Any) -> dict[str, str]:
    return {"field": name, "from": text(before), "to": text(after)}


def text(value: Any) -> str:
    if isinstance(value, list | tuple):
        value = ", ".join(str(v) for v in value)
    return _UNKNOWN if value in (None, "") else str(value)


def drift(shown: dict[str, Any], now: Plan) -> str | None:
    """How the plan read now differs from the one the person saw, or None when they agree."""
    was = {str(c.get("field")): (c.get("from"), c.get("to")) for c in shown.get("changes") or []
           if isinstance(c, dict)}
    current = {c["field"]: (c["from"], c["to"]) for c in now.changes}
    for name in [*was, *(n for n in current if n not in was)]:  # in the card's order
        if was.get(name) != current.get(name):
            a, b = was.get(name, (None, None)), current.get(name, (None, None))
            return f"{name} was {a[0]} → {a[1]} on the card, is {b[0]} → {b[1]} now"
    return None


class RollbackBackend(Protocol):
    name: str
    settles: bool
    """Whether re-checking the error rate should wait ``verify.settle_s`` after the rollout."""

    async def plan_rollback(self, req: ChangeRequest) -> Plan: ...

    async def rollback(self, req: ChangeRequest, plan: Plan) -> dict[str, Any]: ...

    async def wait(self, req: ChangeRequest, action: dict[str, Any], timeout_s: float, poll_s: float) -> Rollout: ...


class ScaleBackend(Protocol):
    name: str
    settles: bool

    async def plan_scale(self, req: ChangeRequest) -> Plan: ...

    async def scale(self, req: ChangeRequest, plan: Plan) -> dict[str, Any]: ...

    async def wait(self, req: ChangeRequest, action: dict[str, Any], timeout_s: float, poll_s: float) -> Rollout: ...


def _where(service: Service) -> tuple[str, str]:
    if service.kubernetes is None:
        raise InvalidArguments(f"the catalog has no kubernetes namespace/deployment for {service.id}")
    return service.kubernetes.namespace, service.kubernetes.deployment


def _images(tpl: dict[str, Any]) -> list[str]:
    return list(images_of(tpl))


def names(wanted: str, images: list[str], *also: str | None) -> bool:
    """Whether ``wanted`` names a release: its version, one of its images, or an image's tag."""
    tags = {i.rsplit(":", 1)[1] for i in images if ":" in i.rsplit("/", 1)[-1]}
    return wanted in images or wanted in tags or any(wanted == a for a in also if a)


class KubernetesActions:
    """``kubectl rollout undo`` and ``kubectl scale``, done directly on the service's Deployment."""

    name = "kubernetes"
    settles = True

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    async def plan_rollback(self, req: ChangeRequest) -> Plan:
        namespace, name = _where(req.service)
        deployment = await self.kube.deployment(namespace, name)
        spec, meta = deployment.get("spec") or {}, deployment.get("metadata") or {}
        where = f"{namespace}/{name}"
        if spec.get("paused"):
            raise Refused(f"the rollout of {where} is paused: resume it (kubectl rollout resume) or roll back "
                          "by hand; a paused deployment would not roll out the older template", code="paused")
        labels = (spec.get("selector") or {}).get("matchLabels") or {}
        sets = await self.kube.replica_sets(namespace, ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
        revisions = _revisions(sets, name)
        if not revisions:
            raise NotFound(f"{where} has no rollout history (no ReplicaSets it owns)")
        now_tpl = template(deployment)
        current = next((n for n in sorted(revisions, reverse=True) if template(revisions[n]) == now_tpl), None)
        observed = (deployment.get("status") or {}).get("observedGeneration")
        if current is None or (isinstance(observed, int) and observed < int(meta.get("generation") or 0)):
            # A template written and not rolled out yet (`kubectl set image` a moment ago, a controller behind):
            # "from" would be a revision that is not what runs, and the rollback would undo an edit nobody saw.
            raise Conflict(f"a rollout of {where} is under way (its newest template has no ReplicaSet yet): wait "
                           "for it (kubectl rollout status), then ask again", code="rollout_under_way")
        target = _target(req, revisions, current, where)
        if template(revisions[target]) == now_tpl:
            raise Refused(f"revision {target} of {where} is the template running now: a rollback to it would "
                          "change nothing", code="no_change")
        cur_rs, to_rs = revisions[current], revisions[target]
        cur_images, to_images = _images(template(cur_rs)), _images(template(to_rs))
        changes = [line("revision", current, target), line("images", cur_images, to_images),
                   line("change_cause", _cause(cur_rs), _cause(to_rs)),
                   line("deployed_at", _created(cur_rs), _created(to_rs))]
        # What else the older template takes back (an env value, resources, a volume: named, never their values):
        # a rollback across a config change undoes it too.
        if others := [d for d in differences(now_tpl, template(to_rs)) if not d.startswith(("image of ",
                                                                                           "restartedAt"))]:
            changes.append({"field": "also_changes", "from": "—", "to": ", ".join(others)[:300]})
        summary = (f"{req.service.id} {req.environment}: revision {current} ({text(cur_images)}) → "
                   f"revision {target} ({text(to_images)})")
        return Plan(changes, summary, {"namespace": namespace, "name": name, "revision": target,
                                       "template": template(to_rs), "generation": meta.get("generation"),
                                       "annotated": bool(meta.get("annotations"))})

    async def rollback(self, req: ChangeRequest, plan: Plan) -> dict[str, Any]:
        t = plan.target
        who = req.confirmed_by or req.requested_by or "someone"
        cause = f"rollback to revision {t['revision']} by {who} via OpsPilot" + (f": {req.reason}" if req.reason
                                                                                 else "")
        # As kubectl rollout undo: the target's template replaces the Deployment's, the cause is recorded; the
        # test op makes the API server refuse it if the spec changed since the plan was read.
        ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/generation", "value": t["generation"]},
                                     {"op": "replace", "path": "/spec/template", "value": t["template"]}]
        ops.append({"op": "add", "path": "/metadata/annotations/kubernetes.io~1change-cause", "value": cause}
                   if t["annotated"] else {"op": "add", "path": "/metadata/annotations", "value": {_CAUSE: cause}})
        body = await self.kube.patch_deployment(t["namespace"], t["name"], ops)
        return {"namespace": t["namespace"], "deployment": t["name"], "to_revision": t["revision"],
                "change_cause": cause, "generation": (body.get("metadata") or {}).get("generation"),
                "images": _images(t["template"])}

    async def plan_scale(self, req: ChangeRequest) -> Plan:
        namespace, name = _where(req.service)
        deployment = await self.kube.deployment(namespace, name)
        now = (deployment.get("spec") or {}).get("replicas", 1)
        if now == req.replicas:
            raise Refused(f"{namespace}/{name} runs {now} replicas already", code="no_change")
        return Plan([line("replicas", now, req.replicas)],
                    f"{req.service.id} {req.environment}: {now} → {req.replicas} replicas",
                    {"namespace": namespace, "name": name, "replicas": now})

    async def scale(self, req: ChangeRequest, plan: Plan) -> dict[str, Any]:
        t = plan.target
        ops = [{"op": "test", "path": "/spec/replicas", "value": t["replicas"]},
               {"op": "replace", "path": "/spec/replicas", "value": req.replicas}]
        await self.kube.scale(t["namespace"], t["name"], ops)
        return {"namespace": t["namespace"], "deployment": t["name"], "replicas": req.replicas}

    async def wait(self, req: ChangeRequest, action: dict[str, Any], timeout_s: float, poll_s: float) -> Rollout:
        """The rollout followed to its end, then the Deployment read once more: finished is not "as planned" when
        something else changed it meanwhile (an autoscaler setting replicas back, a colleague's deploy)."""
        rollout = await watch_rollout(self.kube, *_where(req.service), action.get("generation"), timeout_s, poll_s)
        if rollout.status != "complete":
            return rollout
        spec = (await self.kube.deployment(*_where(req.service))).get("spec") or {}
        if "replicas" in action and spec.get("replicas", 1) != action["replicas"]:
            return Rollout("superseded", f"it asks for {spec.get('replicas', 1)} replicas now, not "
                           f"{action['replicas']}: an autoscaler or someone else changed it since", rollout.waited_s)
        images = _images(spec.get("template") or {})
        if action.get("images") and images != action["images"]:
            return Rollout("superseded", f"it runs {text(images)} now, not {text(action['images'])}: someone or "
                           "something changed it since", rollout.waited_s)
        return rollout


def _revisions(sets: list[dict[str, Any]], deployment: str) -> dict[int, dict[str, Any]]:
    """The Deployment's ReplicaSets by their revision now (as kubectl rollout undo --to-revision reads them)."""
    out: dict[int, dict[str, Any]] = {}
    for rs in sets:
        meta = rs.get("metadata") or {}
        if not any(isinstance(o, dict) and o.get("kind") == "Deployment" and o.get("name") == deployment
                   for o in meta.get("ownerReferences") or []):
            continue
        try:
            out[int((meta.get("annotations") or {})[_REVISION])] = rs
        except (KeyError, ValueError):
            continue
    return out


def _cause(rs: dict[str, Any]) -> str | None:
    return ((rs.get("metadata") or {}).get("annotations") or {}).get(_CAUSE)


def _created(rs: dict[str, Any]) -> str | None:
    """When the revision's ReplicaSet was created, in UTC with Z (the SDK writes +00:00). A ReplicaSet a rollback
    reused was created for its first revision: that time says when it was first deployed, not this time."""
    meta = rs.get("metadata") or {}
    at = iso(timestamp(meta.get("creationTimestamp")))
    return f"{at} (first; deployed again since)" if at and (meta.get("annotations") or {}).get(_HISTORY) else at


def _target(req: ChangeRequest, revisions: dict[int, dict[str, Any]], current: int, where: str) -> int:
    kept = ", ".join(f"{n} ({text(_images(template(rs)))})" for n, rs in sorted(revisions.items()))
    if req.to_revision is not None:
        if req.to_revision not in revisions:
            raise NotFound(f"revision {req.to_revision} of {where} no longer exists; kept: {kept}")
        return req.to_revision
    if req.to_release:
        wanted = req.to_release.strip()
        for n in sorted(revisions, reverse=True):
            if n != current and names(wanted, _images(template(revisions[n])), _cause(revisions[n]),
                                       f"revision {n}", str(n)):
                return n
        raise NotFound(f"no earlier revision of {where} runs {wanted!r}; kept: {kept}")
    earlier = [n for n in revisions if n < current]
    if not earlier:
        raise NotFound(f"{where} has no revision before {current} to roll back to; kept: {kept}")
    return max(earlier)
