"""A Deployment and its ReplicaSets changed the way the deployment controller changes them, for the Kubernetes
API stand-in (``OpsFakes.deployment`` / ``OpsFakes.replica_sets``): what ``kubectl set image``, ``set env``,
``rollout restart``, ``rollout undo``, ``scale`` and ``rollout pause/resume`` leave behind.

What the controller does, as modelled here (pkg/controller/deployment): a template change makes it look for a
ReplicaSet whose template equals the new one (ignoring ``pod-template-hash``); found (a rollback), it bumps that
ReplicaSet's revision annotation to max+1 and appends the old number to ``revision-history``; not found, it
creates one (creationTimestamp = now). The Progressing condition says "ReplicaSet "X" is progressing." and,
``rollout_s`` later, "... has successfully progressed."; every change the controller makes to a ReplicaSet moves
its kube-controller-manager managedFields time (status writes have their own ``status`` entry)."""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

_REVISION = "deployment.kubernetes.io/revision"
_HISTORY = "deployment.kubernetes.io/revision-history"


def _later(at: str, seconds: float) -> str:
    moved = datetime.fromisoformat(at.replace("Z", "+00:00")) + timedelta(seconds=seconds)
    return moved.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _touch(obj: dict[str, Any], manager: str, at: str, subresource: str | None = None) -> None:
    entries = obj["metadata"].setdefault("managedFields", [])
    entry = next((e for e in entries if e["manager"] == manager and e.get("subresource") == subresource), None)
    if entry is None:
        entry = {"manager": manager, "operation": "Update", "apiVersion": "apps/v1", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:replicas": {}}} if subresource == "scale" else {"f:metadata": {}}}
        if subresource:
            entry["subresource"] = subresource
        entries.append(entry)
    entry["time"] = at


class Rollouts:
    def __init__(self, image: str = "payments-api:1.4.1", at: str = "2026-11-28T08:00:00Z", *,
                 name: str = "payments-api", namespace: str = "payments", app: str = "payments-api",
                 env: dict[str, str] | None = None, rollout_s: float = 30) -> None:
        self.name, self.namespace, self.app, self.rollout_s = name, namespace, app, rollout_s
        container: dict[str, Any] = {"name": "api", "image": image,
                                     "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                                     "resources": {"limits": {"memory": "512Mi"}}}
        self.deployment: dict[str, Any] = {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "generation": 1, "creationTimestamp": at,
                         "managedFields": []},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": app}},
                     "template": {"metadata": {"labels": {"app": app}}, "spec": {"containers": [container]}}},
            "status": {"observedGeneration": 1, "replicas": 3, "conditions": []}}
        self.replica_sets: list[dict[str, Any]] = []
        _touch(self.deployment, "kubectl-client-side-apply", at)
        self._sync(at)
        self._settle()

    # --- what a person does ----------------------------------------------------------------------------

    def set_image(self, image: str, at: str, container: str = "api") -> None:
        self._container(container)["image"] = image
        self._changed("kubectl-set", at)

    def set_env(self, name: str, value: str, at: str, container: str = "api") -> None:
        env = self._container(container).setdefault("env", [])
        env[:] = [e for e in env if e["name"] != name] + [{"name": name, "value": value}]
        self._changed("kubectl-set", at)

    def restart(self, at: str) -> None:
        meta = self.deployment["spec"]["template"]["metadata"]
        meta.setdefault("annotations", {})["kubectl.kubernetes.io/restartedAt"] = at
        self._changed("kubectl-rollout", at)

    def undo(self, at: str, to_revision: int | None = None) -> None:
        """``kubectl rollout undo``: the Deployment's template becomes that revision's (without its hash)."""
        current = max(self._revision(rs) for rs in self.replica_sets)
        wanted = to_revision if to_revision is not None else \
            max(self._revision(rs) for rs in self.replica_sets if self._revision(rs) < current)
        rs = next(rs for rs in self.replica_sets if self._revision(rs) == wanted)
        tpl = copy.deepcopy(rs["spec"]["template"])
        tpl["metadata"]["labels"].pop("pod-template-hash")
        self.deployment["spec"]["template"] = tpl
        self._changed("kubectl-rollout", at)

    def scale(self, replicas: int, at: str, manager: str = "kubectl") -> None:
        self.deployment["spec"]["replicas"] = replicas
        self.deployment["metadata"]["generation"] += 1
        _touch(self.deployment, manager, at, "scale")
        self._settle()
        current = self._current()
        if current is not None and not self.deployment["spec"].get("paused"):
            current["spec"]["replicas"] = replicas  # the controller scales the current ReplicaSet
            _touch(current, "kube-controller-manager", at)

    def pause(self, at: str) -> None:
        self.deployment["spec"]["paused"] = True
        _touch(self.deployment, "kubectl-rollout", at)
        self._condition("Unknown", "DeploymentPaused", "Deployment is paused", at)

    def resume(self, at: str) -> None:
        self.deployment["spec"]["paused"] = False
        _touch(self.deployment, "kubectl-rollout", at)
        self._condition("Unknown", "DeploymentResumed", "Deployment is resumed", at)
        self._sync(at)

    # --- what the controller does ----------------------------------------------------------------------

    def _container(self, name: str) -> dict[str, Any]:
        return next(c for c in self.deployment["spec"]["template"]["spec"]["containers"] if c["name"] == name)

    def _changed(self, manager: str, at: str) -> None:
        self.deployment["metadata"]["generation"] += 1
        _touch(self.deployment, manager, at)
        if not self.deployment["spec"].get("paused"):
            self._sync(at)
            self._settle()

    def _settle(self) -> None:
        """The rollout done at once, as ``kubectl rollout status`` reads it (this simulator has no pods)."""
        wanted = self.deployment["spec"]["replicas"]
        self.deployment["status"].update(observedGeneration=self.deployment["metadata"]["generation"],
                                         replicas=wanted, updatedReplicas=wanted, availableReplicas=wanted)

    # --- what the API server does with a PATCH (the stand-in server calls these) ------------------------

    def patch(self, body: Any, content_type: str, at: str, manager: str = "opspilot") -> dict[str, Any]:
        """PATCH the Deployment: a JSON patch (RFC 6902) or a merge patch. Raises PatchFailed (422) when a
        ``test`` op fails, leaving the Deployment as it was; a changed template rolls out as any other."""
        was = copy.deepcopy(self.deployment)
        new = json_patch(was, body) if content_type == "application/json-patch+json" else merge(was, body)
        template_changed = new["spec"]["template"] != self.deployment["spec"]["template"]
        self.deployment.clear()
        self.deployment.update(new)
        if template_changed:
            self._changed(manager, at)
        else:
            _touch(self.deployment, manager, at)
        return self.deployment

    def scale_object(self) -> dict[str, Any]:
        meta = self.deployment["metadata"]
        return {"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "spec": {"replicas": self.deployment["spec"]["replicas"]},
                "status": {"replicas": self.deployment["status"].get("replicas", 0), "selector": f"app={self.app}"}}

    def patch_scale(self, body: Any, content_type: str, at: str, manager: str = "opspilot") -> dict[str, Any]:
        scale = self.scale_object()
        new = json_patch(scale, body) if content_type == "application/json-patch+json" else merge(scale, body)
        self.scale(int(new["spec"]["replicas"]), at, manager)
        return self.scale_object()

    @staticmethod
    def _revision(rs: dict[str, Any]) -> int:
        return int(rs["metadata"]["annotations"][_REVISION])

    def _current(self) -> dict[str, Any] | None:
        return max(self.replica_sets, key=self._revision, default=None)

    def _sync(self, at: str) -> None:
        tpl = self.deployment["spec"]["template"]
        same = next((rs for rs in self.replica_sets if self._bare(rs) == tpl), None)
        current = self._current()
        if same is not None and same is current:
            return
        top = max((self._revision(rs) for rs in self.replica_sets), default=0)
        if same is not None:  # a rollback: the older ReplicaSet is reused, renumbered
            notes = same["metadata"]["annotations"]
            notes[_HISTORY] = ",".join(filter(None, [notes.get(_HISTORY), notes[_REVISION]]))
            notes[_REVISION] = str(top + 1)
            new = same
        else:
            new = self._replica_set(tpl, top + 1, at)
            self.replica_sets.append(new)
        _touch(new, "kube-controller-manager", at)
        self._condition("True", "ReplicaSetUpdated", f'ReplicaSet "{new["metadata"]["name"]}" is progressing.', at)
        done = _later(at, self.rollout_s)  # scaled up, the old one down, then complete
        new["spec"]["replicas"] = self.deployment["spec"]["replicas"]
        _touch(new, "kube-controller-manager", done)
        _touch(new, "kube-controller-manager", done, "status")
        for old in self.replica_sets:
            if old is not new and old["spec"]["replicas"]:
                old["spec"]["replicas"] = 0
                _touch(old, "kube-controller-manager", done)
        self._condition("True", "NewReplicaSetAvailable",
                        f'ReplicaSet "{new["metadata"]["name"]}" has successfully progressed.', done)

    def _bare(self, rs: dict[str, Any]) -> dict[str, Any]:
        tpl = copy.deepcopy(rs["spec"]["template"])
        tpl["metadata"]["labels"].pop("pod-template-hash", None)
        return tpl  # type: ignore[no-any-return]

    def _replica_set(self, tpl: dict[str, Any], revision: int, at: str) -> dict[str, Any]:
        digest = hashlib.sha256(json.dumps(tpl, sort_keys=True).encode()).hexdigest()[:10]
        template = copy.deepcopy(tpl)
        template["metadata"]["labels"]["pod-template-hash"] = digest
        labels = {"app": self.app, "pod-template-hash": digest}
        return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": f"{self.name}-{digest}", "namespace": self.namespace, "creationTimestamp": at,
                             "labels": labels, "annotations": {_REVISION: str(revision)}, "managedFields": [],
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": self.name,
                                                  "uid": "d-1", "controller": True}]},
                "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": template},
                "status": {"replicas": 0}}

    def _condition(self, status: str, reason: str, message: str, at: str) -> None:
        conditions = self.deployment["status"]["conditions"]
        was = next((c for c in conditions if c["type"] == "Progressing"), None)
        if was is not None and (was["status"], was["reason"]) == (status, reason) and reason != "ReplicaSetUpdated":
            return  # the controller leaves an unchanged condition alone (its times too)
        since = was["lastTransitionTime"] if was is not None and was["status"] == status else at
        conditions[:] = [c for c in conditions if c["type"] != "Progressing"] + [
            {"type": "Progressing", "status": status, "reason": reason, "message": message,
             "lastUpdateTime": at, "lastTransitionTime": since}]


class PatchFailed(Exception):
    """What the API server answers 422 for: a JSON patch whose ``test`` op (or a path) does not hold. It says so
    only in its log: the answer's message is generic (``apiserver/pkg/endpoints/handlers/patch.go``)."""


def _pointer(doc: Any, path: str) -> tuple[Any, str]:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
    for part in parts[:-1]:
        if not isinstance(doc, dict) or part not in doc:
            raise PatchFailed(f"path {path} does not exist")
        doc = doc[part]
    return doc, parts[-1]


def json_patch(doc: dict[str, Any], ops: Any) -> dict[str, Any]:
    """RFC 6902, the ops the client sends (test, add, replace, remove), on objects only."""
    for op in ops:
        parent, key = _pointer(doc, op["path"])
        if not isinstance(parent, dict):
            raise PatchFailed(f"path {op['path']} is not inside an object")
        if op["op"] == "test":
            if parent.get(key) != op["value"]:
                raise PatchFailed(f"testing value {op['path']} failed")
        elif op["op"] in ("add", "replace"):
            if op["op"] == "replace" and key not in parent:
                raise PatchFailed(f"replace of {op['path']}: missing value")
            parent[key] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            if key not in parent:
                raise PatchFailed(f"remove of {op['path']}: missing value")
            del parent[key]
        else:
            raise PatchFailed(f"unsupported op {op['op']}")
    return doc


def merge(doc: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 (which a strategic merge patch of plain maps also is)."""
    for key, value in patch.items():
        if value is None:
            doc.pop(key, None)
        elif isinstance(value, dict) and isinstance(doc.get(key), dict):
            merge(doc[key], value)
        else:
            doc[key] = copy.deepcopy(value)
    return doc
