"""A Deployment's change history as Kubernetes records it: one ReplicaSet per pod template, numbered by
``deployment.kubernetes.io/revision``. What kind of change each revision was is read from the difference
between its pod template and the previous revision's; a rollback is the controller reusing an older
ReplicaSet (its revision bumped, its old numbers kept in ``deployment.kubernetes.io/revision-history``).

Times: a ReplicaSet's creationTimestamp dates the revision that created it. A reused ReplicaSet was created
long before, so the revision now current is dated by the earliest of what was written *because of* it — the
Deployment's Progressing condition naming it (``lastUpdateTime``) and the controller's last update of the
ReplicaSet (``managedFields`` of kube-controller-manager, operation Update) — each at or shortly after the
rollback began, so the time is marked approximate. Older reuses left no time at all: marked unknown.
Env values are never read out (they may hold secrets): only which variable changed."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from tools.ops.catalog import Service
from tools.ops.changes import Change, Found, Scoped, timestamp
from tools.ops.kube import KubeClient
from tools.ops.series import iso
from tools.tool_errors import InvalidArguments

_REVISION = "deployment.kubernetes.io/revision"
_HISTORY = "deployment.kubernetes.io/revision-history"
_CAUSE = "kubernetes.io/change-cause"
_RESTARTED = "kubectl.kubernetes.io/restartedAt"
_HASH = "pod-template-hash"
_CONTROLLER = "kube-controller-manager"
_FIELDS = {"resources": "resources", "command": "command", "args": "args", "envFrom": "envFrom",
           "volumeMounts": "volume mounts", "ports": "ports"}


@dataclass(frozen=True)
class _Revision:
    number: int
    rs: dict[str, Any]
    numbers: tuple[int, ...]  # every revision this ReplicaSet has been, oldest first

    @property
    def reused(self) -> bool:
        return self.number != self.numbers[0]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def template(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod template without the ReplicaSet's own hash label, as the controller compares them."""
    found = copy.deepcopy(_dict(_dict(obj.get("spec")).get("template")))
    labels = _dict(_dict(found.get("metadata")).get("labels"))
    labels.pop(_HASH, None)
    return found


def images_of(tpl: dict[str, Any]) -> tuple[str, ...]:
    """A pod template's images, its init containers' marked so (a migration job's image changing is an image
    change too, and must be seen as one)."""
    pod = _dict(tpl.get("spec"))
    return tuple([str(c["image"]) for c in pod.get("containers") or [] if isinstance(c, dict) and c.get("image")] +
                 [f"{c['image']} (init)" for c in pod.get("initContainers") or []
                  if isinstance(c, dict) and c.get("image")])


def _by_name(items: Any) -> dict[str, Any]:
    return {str(i.get("name")): i for i in items or [] if isinstance(i, dict)}


def _containers(old: Any, new: Any, word: str) -> list[str]:
    before, after, out = _by_name(old), _by_name(new), []
    for name in sorted(before.keys() | after.keys()):
        if name not in before or name not in after:
            out.append(f"{word} {name} {'added' if name not in before else 'removed'}")
            continue
        was, now = dict(before[name]), dict(after[name])
        if was.pop("image", None) != now.pop("image", None):
            out.append(f"image of {word} {name}")
        env_was, env_now = _by_name(was.pop("env", None)), _by_name(now.pop("env", None))
        for var in sorted(env_was.keys() | env_now.keys()):  # names only: values may be secrets
            if env_was.get(var) != env_now.get(var):
                how = "added" if var not in env_was else "removed" if var not in env_now else "changed"
                out.append(f"env {var} {how}")
        out += [f"{_FIELDS.get(k, k)} of {word} {name}" for k in sorted(was.keys() | now.keys())
                if was.get(k) != now.get(k)]
    return out


def differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two pod templates, by name — never a value."""
    out: list[str] = []
    old_meta, new_meta = _dict(old.get("metadata")), _dict(new.get("metadata"))
    notes_was, notes_now = dict(_dict(old_meta.get("annotations"))), dict(_dict(new_meta.get("annotations")))
    if notes_was.pop(_RESTARTED, None) != notes_now.pop(_RESTARTED, None):
        out.append("restartedAt")
    out += [f"annotation {k}" for k in sorted(notes_was.keys() | notes_now.keys())
            if notes_was.get(k) != notes_now.get(k)]
    if old_meta.get("labels") != new_meta.get("labels"):
        out.append("labels")
    pod_was, pod_now = dict(_dict(old.get("spec"))), dict(_dict(new.get("spec")))
    out += _containers(pod_was.pop("initContainers", None), pod_now.pop("initContainers", None), "init container")
    out += _containers(pod_was.pop("containers", None), pod_now.pop("containers", None), "container")
    vol_was, vol_now = _by_name(pod_was.pop("volumes", None)), _by_name(pod_now.pop("volumes", None))
    out += [f"volume {v}" for v in sorted(vol_was.keys() | vol_now.keys()) if vol_was.get(v) != vol_now.get(v)]
    out += [k for k in sorted(pod_was.keys() | pod_now.keys()) if pod_was.get(k) != pod_now.get(k)]
    return out


def _kind(changed: list[str]) -> str:
    if any(c.startswith("image of ") for c in changed):
        return "image"
    if changed == ["restartedAt"]:
        return "restart"  # only the restart annotation differs: nothing else was changed
    return "config" if changed else "rollout"


def _owned(replica_sets: list[dict[str, Any]], deployment: str, found: Found) -> list[_Revision]:
    revisions: dict[int, _Revision] = {}
    for rs in replica_sets:
        meta = _dict(rs.get("metadata"))
        if not any(isinstance(o, dict) and o.get("kind") == "Deployment" and o.get("name") == deployment
                   for o in meta.get("ownerReferences") or []):
            continue
        annotations = _dict(meta.get("annotations"))
        try:
            current = int(annotations.get(_REVISION, ""))
            earlier = [int(n) for n in str(annotations.get(_HISTORY) or "").split(",") if n.strip()]
        except ValueError:
            current = -1
        if current < 0 or timestamp(meta.get("creationTimestamp")) is None:
            found.unreadable += 1
            continue
        numbers = tuple(sorted({*earlier, current}))
        for number in numbers:
            revisions[number] = _Revision(number, rs, numbers)
    return [revisions[n] for n in sorted(revisions)]


def _rollback_time(rs: dict[str, Any], deployment: dict[str, Any], after: float) -> tuple[float, str] | None:
    """The earliest trace of the rollback that made ``rs`` current (each is at or after it began)."""
    meta = _dict(rs.get("metadata"))
    found: list[tuple[float, str]] = []
    for entry in meta.get("managedFields") or []:
        if isinstance(entry, dict) and entry.get("manager") == _CONTROLLER and entry.get("operation") == "Update" \
                and not entry.get("subresource") and (at := timestamp(entry.get("time"))) is not None:
            found.append((at, "the controller's update of the ReplicaSet (managedFields)"))
    named = f'ReplicaSet "{meta.get("name")}"'
    for cond in _dict(deployment.get("status")).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Progressing" and named in str(cond.get("message")) \
                and (at := timestamp(cond.get("lastUpdateTime"))) is not None:
            found.append((at, "the Deployment's Progressing condition"))
    usable = [f for f in found if f[0] >= after]  # older traces are about an earlier rollout of this ReplicaSet
    return min(usable) if usable else None


def rollout_history(replica_sets: list[dict[str, Any]], name: str, source: str,
                    deployment: dict[str, Any] | None = None) -> Found:
    found = Found()
    revisions = _owned(replica_sets, name, found)
    dates: list[float] = []
    for i, rev in enumerate(revisions):
        meta = _dict(rev.rs.get("metadata"))
        tpl = template(rev.rs)
        previous = revisions[i - 1] if i else None
        changed = differences(template(previous.rs), tpl) if previous else []
        kind, to_version, note, dated = _kind(changed) if previous else "rollout", None, None, None
        at = timestamp(meta.get("creationTimestamp")) or 0.0
        earlier = [r for r in revisions[:max(i - 1, 0)] if r.rs is not rev.rs and template(r.rs) == tpl]
        if rev.reused or earlier:
            back_to = max(n for n in rev.numbers if n < rev.number) if rev.reused else earlier[-1].number
            kind, to_version = "rollback", f"revision {back_to}"
        if rev.reused:
            after = dates[-1] if dates else at
            traced = _rollback_time(rev.rs, deployment or {}, after) if i == len(revisions) - 1 else None
            if traced:
                at, dated = traced[0], "approximate"
                note = (f"the rollback reused the ReplicaSet of revision {back_to}, so its creation time is not "
                        f"this change's; dated by {traced[1]}, at or shortly after the rollback began")
            else:
                at, dated = after + 0.001, "unknown"  # keeps the order; the time itself is not claimed
                note = (f"the rollback reused the ReplicaSet of revision {back_to}; Kubernetes kept no time for it: "
                        f"after {iso(after)}")
        dates.append(at)
        latest = rev.number == rev.numbers[-1]  # the change-cause annotation speaks for the latest use only
        cause = _text(_dict(meta.get("annotations")).get(_CAUSE)) if latest else None
        if cause is not None and previous is not None and cause == _text(
                _dict(_dict(previous.rs.get("metadata")).get("annotations")).get(_CAUSE)):
            # Kubernetes copies the Deployment's annotations onto each new ReplicaSet: a deploy that set none
            # carries the one before it (OpsPilot's own rollback's, say), which is not this revision's cause.
            cause = None
            note = ((note + "; ") if note else "") + (f"its change-cause annotation is revision {previous.number}'s, "
                                                      "carried over: none was recorded for this revision")
        found.changes.append(Change(
            at=at, kind=kind, source=source, version=f"revision {rev.number}", description=cause,
            images=images_of(tpl), from_images=images_of(template(previous.rs)) if kind == "image" and previous else (),
            from_version=f"revision {previous.number}" if previous else None, to_version=to_version,
            changed=tuple(changed), note=note, dated=dated))
    if deployment:
        _deployment_changes(deployment, revisions, source, found)
    return found


def _text(value: Any) -> str | None:
    return None if value in (None, "") else str(value)[:300]


def _deployment_changes(deployment: dict[str, Any], revisions: list[_Revision], source: str, found: Found) -> None:
    """What the Deployment itself records: its current pause or resume (the Progressing condition), scaling
    through the scale subresource (managedFields), and template changes held back while paused."""
    spec, meta = _dict(deployment.get("spec")), _dict(deployment.get("metadata"))
    for cond in _dict(deployment.get("status")).get("conditions") or []:
        if not isinstance(cond, dict) or cond.get("type") != "Progressing":
            continue
        kind = {"DeploymentPaused": "pause", "DeploymentResumed": "resume"}.get(str(cond.get("reason")))
        if kind and (at := timestamp(cond.get("lastUpdateTime"))) is not None:
            found.changes.append(Change(at=at, kind=kind, source=source, description=_text(cond.get("message"))))
    scaled = sorted((at, str(e.get("manager") or "")) for e in meta.get("managedFields") or []
                    if isinstance(e, dict) and e.get("subresource") == "scale"
                    and (at := timestamp(e.get("time"))) is not None)
    for n, (at, manager) in enumerate(scaled):
        last = n == len(scaled) - 1  # the replica count now is the latest scaling's; earlier ones are not kept
        found.changes.append(Change(
            at=at, kind="scale", source=source, author=_text(manager),
            to_version=f"{spec.get('replicas')} replicas" if last and spec.get("replicas") is not None else None,
            note=None if last else "the replica count it set was not recorded"))
    if spec.get("paused"):
        pending = differences(template(revisions[-1].rs), template(deployment)) if revisions else []
        found.notes.append("the deployment is paused: template changes are not rolled out until it is resumed" +
                           (f" (waiting: {', '.join(pending[:5])})" if pending else ""))


class KubernetesChanges(Scoped):
    """The deployment's change history: its ReplicaSets (one per revision, as ``kubectl rollout history`` reads
    them) and what the Deployment itself records (pause, resume, scaling)."""

    def __init__(self, kube: KubeClient, environments: list[str] | None = None) -> None:
        self.kube = kube
        self.name = "Kubernetes rollout history"
        self.environments = environments

    async def changes(self, service: Service, environment: str, start: float, end: float) -> Found:
        if service.kubernetes is None:
            raise InvalidArguments(f"the catalog has no kubernetes namespace/deployment for {service.id}")
        namespace, name = service.kubernetes.namespace, service.kubernetes.deployment
        deployment = await self.kube.deployment(namespace, name)
        labels = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        sets = await self.kube.replica_sets(namespace, selector)
        return rollout_history(sets, name, f"{self.name} ({namespace}/{name})", deployment)
