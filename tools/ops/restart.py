"""restart_service backends: Kubernetes (rollout restart through the API server), a webhook (e.g. a CI/CD
job), and an in-memory demo. Each can also wait for the result, so the tool can verify what it did."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import urljoin

from tools.ops.catalog import Service
from tools.ops.http import Http
from tools.ops.kube import KubeClient
from tools.tool_errors import InvalidArguments, ToolError


@dataclass(frozen=True)
class RestartRequest:
    service: Service
    environment: str
    idempotency_key: str
    requested_by: str | None
    confirmed_by: str | None
    reason: str = ""


@dataclass(frozen=True)
class Rollout:
    status: str  # complete | timed_out | failed | unknown | superseded (rolled out, then changed by someone else)
    detail: str
    waited_s: float = 0.0


class RestartBackend(Protocol):
    name: str
    settles: bool
    """Whether re-checking the error rate should wait ``verify.settle_s`` after the rollout."""

    async def restart(self, req: RestartRequest) -> dict[str, Any]: ...

    async def wait(self, req: RestartRequest, action: dict[str, Any], timeout_s: float, poll_s: float) -> Rollout: ...


@dataclass
class DemoRestarts:
    """In memory: remembers what it restarted (tests count executions); the rollout completes at once."""

    name: str = "demo"
    settles: bool = False
    delay_s: float = 0.0
    done: list[dict[str, Any]] = field(default_factory=list)
    listeners: list[Any] = field(default_factory=list)

    async def restart(self, req: RestartRequest) -> dict[str, Any]:
        for record in self.done:
            if record["idempotency_key"] == req.idempotency_key:
                return record
        await asyncio.sleep(self.delay_s)
        record = {"service_id": req.service.id, "environment": req.environment,
                  "restarted_at": datetime.now(UTC).isoformat(timespec="seconds"),
                  "idempotency_key": req.idempotency_key}
        self.done.append(record)
        for listener in self.listeners:
            listener(req.service.id, req.environment)
        return record

    async def wait(self, req: RestartRequest, action: dict[str, Any], timeout_s: float, poll_s: float) -> Rollout:
        return Rollout("complete", "demo rollout finished at once")


class KubernetesRestarts:
    """``kubectl rollout restart``, done directly: patch the pod template's restartedAt annotation."""

    name = "kubernetes"
    settles = True

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    @staticmethod
    def _where(service: Service) -> tuple[str, str]:
        if service.kubernetes is None:
            raise InvalidArguments(f"the catalog has no kubernetes namespace/deployment for {service.id}")
        return service.kubernetes.namespace, service.kubernetes.deployment

    async def restart(self, req: RestartRequest) -> dict[str, Any]:
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        namespace, deployment = self._where(req.service)
        # Read first: a refusal (credentials, TLS, no such deployment) is then told as one, before anything is sent
        await self.kube.deployment(namespace, deployment)
        body = await self.kube.restart(namespace, deployment, stamp)
        return {"namespace": namespace, "deployment": deployment, "restartedAt": stamp,
                "generation": (body.get("metadata") or {}).get("generation")}

    async def wait(self, req: RestartRequest, action: dict[str, Any], timeout_s: float, poll_s: float) -> Rollout:
        return await watch_rollout(self.kube, *self._where(req.service), action.get("generation"), timeout_s, poll_s)


async def watch_rollout(kube: KubeClient, namespace: str, name: str, generation: Any, timeout_s: float,
                        poll_s: float) -> Rollout:
    """Poll the Deployment until ``kubectl rollout status`` would say it finished, at most ``timeout_s``."""
    started = time.monotonic()
    detail = "no status yet"
    while True:
        deployment = await kube.deployment(namespace, name)
        done, detail = rollout_state(deployment, generation)
        waited = round(time.monotonic() - started, 1)
        if done:
            return Rollout("complete", detail, waited)
        if waited >= timeout_s:
            return Rollout("timed_out", f"the rollout did not finish within {timeout_s:g}s: {detail}", waited)
        await asyncio.sleep(poll_s)


def rollout_state(deployment: dict[str, Any], generation: Any) -> tuple[bool, str]:
    """The same test ``kubectl rollout status`` applies."""
    meta, spec, status = deployment.get("metadata") or {}, deployment.get("spec") or {}, deployment.get("status") or {}
    wanted = int(spec.get("replicas", 1))
    updated, available = int(status.get("updatedReplicas", 0)), int(status.get("availableReplicas", 0))
    total = int(status.get("replicas", 0))
    observed = int(status.get("observedGeneration", 0))
    generation = int(generation or meta.get("generation", 0))
    detail = f"{updated}/{wanted} updated, {available}/{wanted} available"
    if observed < generation:
        return False, f"waiting for the controller to observe generation {generation}; {detail}"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return False, f"progress deadline exceeded; {detail}"
    return updated >= wanted and available >= wanted and total <= updated, detail


class WebhookRestarts:
    """POST the restart to a URL (a CI/CD job); if it answers with a ``status_url``, poll it."""

    name = "webhook"
    settles = True

    def __init__(self, http: Http, url: str) -> None:
        self.http = http
        self.url = url

    async def restart(self, req: RestartRequest) -> dict[str, Any]:
        k = req.service.kubernetes
        body = await self.http.request("POST", self.url, body={
            "service_id": req.service.id, "environment": req.environment,
            "namespace": k.namespace if k else None, "deployment": k.deployment if k else None,
            "idempotency_key": req.idempotency_key, "requested_by": req.requested_by,
            "confirmed_by": req.confirmed_by, "reason": req.reason})
        return job_answer(self.url, body)

    async def wait(self, req: RestartRequest, action: dict[str, Any], timeout_s: float, poll_s: float) -> Rollout:
        return await follow_job(self.http, action, timeout_s, poll_s)


def job_answer(url: str, body: Any) -> dict[str, Any]:
    """What a webhook answered: its job id, status and message, and (resolved against ``url``) the status URL to
    follow."""
    answer = body if isinstance(body, dict) else {}
    return {"job": answer.get("id") or answer.get("job_id"), "status": answer.get("status"),
            "message": answer.get("message"),
            "status_url": urljoin(url, str(answer["status_url"])) if answer.get("status_url") else None}


_SUCCEEDED = ("succeeded", "success", "complete", "completed", "done")
_FAILED = ("failed", "failure", "error", "cancelled", "canceled", "rejected")


def _settled(body: Any, waited: float) -> Rollout | None:
    """How a job ended, by its own word (``status``, and ``message`` when it failed); None while it says nothing
    final."""
    answer = body if isinstance(body, dict) else {}
    state = str(answer.get("status") or "").lower()
    if state in _SUCCEEDED:
        return Rollout("complete", f"the job reports {state}", waited)
    if state in _FAILED:
        return Rollout("failed", f"the job reports {state}: {answer.get('message') or ''}".rstrip(": "), waited)
    return None


async def follow_job(http: Http, action: dict[str, Any], timeout_s: float, poll_s: float) -> Rollout:
    """The job's own answer when it already said how it ended; else poll its ``status_url`` until it succeeds or
    fails, at most ``timeout_s``."""
    if (said := _settled(action, 0.0)) is not None:
        return said
    if not action.get("status_url"):
        return Rollout("unknown", "the webhook gave no status_url to follow; check the job yourself")
    started = time.monotonic()
    while True:
        body = await http.request("GET", str(action["status_url"]))
        waited = round(time.monotonic() - started, 1)
        if (ended := _settled(body, waited)) is not None:
            return ended
        if waited >= timeout_s:
            state = str(body.get("status") or "") if isinstance(body, dict) else ""
            return Rollout("timed_out", f"the job was still {state or 'running'} after {timeout_s:g}s", waited)
        await asyncio.sleep(poll_s)


async def followed(follow: Awaitable[Rollout]) -> Rollout:
    """Follow a change that was made: a failure to follow it says nothing about the change itself."""
    try:
        return await follow
    except ToolError as exc:
        return Rollout("unknown", f"its progress could not be followed: {exc.message}")
