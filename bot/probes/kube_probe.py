"""Kubernetes permissions: whether the configured credentials may do what each tool needs, on each service in
the catalog (SelfSubjectAccessReview, as ``kubectl auth can-i``): a missing grant is found now, not mid-incident.
And whether each Deployment the catalog names is there at all (RBAC grants on a name that does not exist)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.probes import Check
from tools import ops
from tools.tool_errors import NotFound, PermissionDenied, ToolError

if TYPE_CHECKING:  # the client library is imported only where Kubernetes is configured
    from tools.ops.catalog import Service
    from tools.ops.kube import KubeClient

_NEEDS: dict[str, list[tuple[str, str, str | None]]] = {  # verb, resource, subresource — as rbac.yaml grants
    "restart_service": [("get", "deployments", None), ("patch", "deployments", None)],
    "rollback_service": [("get", "deployments", None), ("patch", "deployments", None),
                         ("list", "replicasets", None)],
    "scale_service": [("get", "deployments", None), ("patch", "deployments", "scale")],
    "recent_changes": [("get", "deployments", None), ("list", "replicasets", None)],
}


async def kubernetes_checks(toolbox: ops.Toolbox) -> list[Check]:
    users = [(name, kube) for name, backend in (
        ("restart_service", toolbox.restarts), ("rollback_service", toolbox.rollbacks),
        ("scale_service", toolbox.scaling), *(("recent_changes", c) for c in toolbox.changes))
        if (kube := getattr(backend, "kube", None)) is not None]
    if not users:  # nothing configured for Kubernetes: its client library is not even imported
        return []
    checks: list[Check] = []
    placed = [s for s in toolbox.catalog.services if s.kubernetes is not None]
    if not placed:  # nothing to ask about: "granted" would be said of nothing
        return [Check("Kubernetes", False, f"{', '.join(n for n, _ in users)} act through Kubernetes, and no catalog "
                      "service names its namespace and deployment: every call would fail",
                      "add kubernetes: {namespace: …, deployment: …} to each service in the catalog")]
    if len(placed) < len(toolbox.catalog.services):
        bare = [s.id for s in toolbox.catalog.services if s.kubernetes is None]
        checks.append(Check("Kubernetes", False, f"{len(bare)} catalog services name no Kubernetes deployment "
                            f"({', '.join(bare[:5])}{'…' if len(bare) > 5 else ''}): the Kubernetes tools fail on them",
                            "add kubernetes: {namespace: …, deployment: …} to them", required=False))
    for name, kube in users:
        missing: list[str] = []
        try:
            for service in placed:
                if service.kubernetes is None:  # (placed: never; said for the type checker)
                    continue
                ns, deployment = service.kubernetes.namespace, service.kubernetes.deployment
                for verb, resource, sub in _NEEDS[name]:
                    target = deployment if resource == "deployments" else None
                    ok, _ = await kube.allowed(ns, verb, resource, target, sub)
                    if not ok:
                        what = resource + (f"/{sub}" if sub else "")
                        missing.append(f"{verb} {what}" + (f" {ns}/{target}" if target else f" in {ns}"))
        except ToolError as exc:
            checks.append(Check(f"Kubernetes permissions ({name})", False, exc.message,
                                "check the cluster API address and credentials in the toolbox section"))
            continue
        checks.append(Check(f"Kubernetes permissions ({name})", not missing,
                            "missing: " + "; ".join(missing[:6]) if missing else f"granted on {len(placed)} services",
                            "grant them as deploy/kubernetes/rbac.yaml does"))
    return checks + await _deployments(users[0][1], placed)


async def _deployments(kube: KubeClient, placed: list[Service]) -> list[Check]:
    """Each Deployment the catalog names, read (GET, as a restart's first step): a typo or a renamed one fails
    every change to that service, whatever RBAC grants on its name. A warning: the other services still work."""
    absent, unread = [], 0
    for service in placed:
        if service.kubernetes is None:  # (placed: never; said for the type checker)
            continue
        ns, name = service.kubernetes.namespace, service.kubernetes.deployment
        try:
            await kube.deployment(ns, name)
        except NotFound:
            absent.append(f"{service.id} ({ns}/{name})")
        except PermissionDenied:  # why is said by the permissions lines; never "found"
            unread += 1
            continue
        except ToolError as exc:
            return [Check("Kubernetes deployments", False, exc.message,
                          "check the cluster API address and credentials in the toolbox section", required=False)]
    if absent:
        also = f"; {unread} more not read (see the permissions lines)" if unread else ""
        return [Check("Kubernetes deployments", False, f"not found: {', '.join(absent[:6])}"
                      f"{'…' if len(absent) > 6 else ''}: every change to them fails{also}",
                      "correct kubernetes: {namespace, deployment} of these services in the catalog", required=False)]
    if unread:
        return [Check("Kubernetes deployments", False, f"{unread} of {len(placed)} not read: the credentials may not "
                      "get them (see the permissions lines)", "grant them as deploy/kubernetes/rbac.yaml does",
                      required=False)]
    return [Check("Kubernetes deployments", True, f"all {len(placed)} found", "")]
