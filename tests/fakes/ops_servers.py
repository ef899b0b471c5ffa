"""Local servers speaking the real request/response formats of Loki, Prometheus, the Kubernetes API
server and a restart webhook — enough protocol to fail a test when the client gets it wrong."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bot.demo.local_server import LocalServer
from tests.fakes.rollouts import PatchFailed, Rollouts


@dataclass
class OpsFakes:
    token: str = "secret-token"
    read_only_token: str = "viewer-token"
    """A token the API server knows but that may not change deployments (403 on PATCH)."""
    tls: ssl.SSLContext | None = None
    """Serve HTTPS; a client certificate it verifies authenticates as its common name (``client_cn``)."""
    client_cn: str = "opspilot"
    loki_lines: list[tuple[float, str]] = field(default_factory=list)
    loki_status: int = 200
    loki_delay_s: float = 0.0
    loki_raw: Any = None
    """query_range's answer as it is (any JSON)."""
    prom_series: dict[str, list[float]] = field(default_factory=dict)
    prom_after_restart: dict[str, float] = field(default_factory=dict)
    prom_raw: dict[str, Any] = field(default_factory=dict)
    prom_instant_warnings: list[str] = field(default_factory=list)  # an instant query's "warnings" (partial data)
    prom_missing_labels: set[str] = field(default_factory=set)
    prom_refuse_counts: bool = False
    """`count(…)` queries answered 422 (too many samples), as a limited Prometheus answers them."""
    """Labels the scraped series do not carry: a `count(…{label!=""})` query finds none (`opspilot check` asks)."""
    """A metric's query_range answer as it is (any JSON: shapes a real Prometheus would not send)."""
    deployment_ready_after_polls: int | None = 2  # None: the rollout never finishes
    webhook_states: list[str] = field(default_factory=lambda: ["running", "succeeded"])
    webhook_answer: tuple[int, Any] | None = None
    """The POST's answer (status, JSON body) instead of a job to follow; a str body is sent as it is (HTML)."""
    job_status: int = 200
    requests: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    restarted: bool = False
    deployment: dict[str, Any] = field(default_factory=lambda: {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "payments-api", "namespace": "payments", "generation": 7},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "payments-api"}},
                 "template": {"metadata": {"labels": {"app": "payments-api"}, "annotations": {}},
                              "spec": {"containers": [{"name": "api", "image": "payments-api:1.4.2"}]}}},
        "status": {"observedGeneration": 7, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3},
    })
    replica_sets: list[dict[str, Any]] = field(default_factory=list)
    """The deployment's rollout history (see :func:`replica_set`)."""
    change_events: list[Any] = field(default_factory=list)
    """What the deploy-events endpoint answers (it ignores the query parameters, as some do)."""
    rollouts: Rollouts | None = None
    """When set, the Deployment and its ReplicaSets are this simulator's, and PATCHes (the Deployment's and its
    scale subresource's) change them as the API server and the deployment controller would."""
    _polls: int = 0

    def __post_init__(self) -> None:
        app = web.Application()
        app.router.add_get("/loki/api/v1/query_range", self.loki)
        app.router.add_get("/api/v1/query_range", self.prom_range)
        app.router.add_get("/api/v1/query", self.prom_instant)
        app.router.add_route("*", "/apis/apps/v1/namespaces/{ns}/deployments/{name}", self.deployment_api)
        app.router.add_route("*", "/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale", self.scale_api)
        app.router.add_get("/apis/apps/v1/namespaces/{ns}/replicasets", self.replica_set_list)
        app.router.add_post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", self.access_review)
        app.router.add_get("/hooks/changes", self.changes)
        app.router.add_post("/hooks/restart", self.webhook)
        app.router.add_post("/hooks/change", self.webhook)
        app.router.add_get("/hooks/jobs/{job}", self.job)
        self.server = LocalServer(app, ssl_context=self.tls)

    @property
    def url(self) -> str:
        return self.server.url

    def _auth(self, request: web.Request) -> web.Response | None:
        peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
        subject = dict(item for rdn in (peer or {}).get("subject", ()) for item in rdn)
        if subject.get("commonName") == self.client_cn:
            return None  # a client certificate signed by the cluster's CA (the TLS layer verified it)
        if request.method == "PATCH" and request.headers.get("Authorization") == f"Bearer {self.read_only_token}":
            return web.json_response({"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                                      "message": 'deployments.apps "payments-api" is forbidden: User "viewer" '
                                                 'cannot patch resource "deployments"'}, status=403)
        if request.headers.get("Authorization") not in (f"Bearer {self.token}", f"Bearer {self.read_only_token}"):
            return web.json_response({"kind": "Status", "status": "Failure", "message": "Unauthorized",
                                      "reason": "Unauthorized", "code": 401}, status=401)
        return None

    # --- Loki -------------------------------------------------------------------------------------------

    async def loki(self, request: web.Request) -> web.Response:
        self.requests.append(("loki", request.path, dict(request.query)))
        if (denied := self._auth(request)) is not None:
            return denied
        await asyncio.sleep(self.loki_delay_s)
        q = request.query
        if self.loki_status != 200:
            return web.Response(status=self.loki_status, text="parse error at line 1, col 5: syntax error")
        if self.loki_raw is not None:
            return web.json_response(self.loki_raw)
        if not q.get("query", "").startswith("{") or "start" not in q or "end" not in q:
            return web.Response(status=400, text="invalid query: need a stream selector, start and end")
        start, end, limit = int(q["start"]), int(q["end"]), int(q.get("limit", 100))
        values = [[str(int(ts * 1e9)), line] for ts, line in self.loki_lines if start <= ts * 1e9 <= end]
        values.sort(reverse=q.get("direction") == "backward")
        return web.json_response({"status": "success", "data": {"resultType": "streams", "result": [
            {"stream": {"app": "payments-api", "env": "prod", "pod": "payments-api-7d9f-abcde"},
             "values": values[:limit]}], "stats": {}}})

    # --- Prometheus -------------------------------------------------------------------------------------

    def _metric_for(self, query: str) -> str:
        if "code=~" in query:
            return "error_rate"
        if "histogram_quantile" in query:
            return "p95_latency_ms"
        return "restarts"

    async def prom_range(self, request: web.Request) -> web.Response:
        self.requests.append(("prom_range", request.path, dict(request.query)))
        q = request.query
        if "query" not in q or "step" not in q:
            return web.json_response({"status": "error", "errorType": "bad_data",
                                      "error": "invalid parameter \"query\""}, status=400)
        if "{" not in q["query"]:
            return web.json_response({"status": "error", "errorType": "bad_data", "error": "parse error"},
                                     status=400)
        if (raw := self.prom_raw.get(self._metric_for(q["query"]))) is not None:
            return web.json_response(raw)
        values = self.prom_series.get(self._metric_for(q["query"]), [])
        end, step = float(q["end"]), 60.0
        points = [[end - (len(values) - 1 - i) * step, str(v)] for i, v in enumerate(values)]
        result = [{"metric": {}, "values": points}] if values else []
        return web.json_response({"status": "success", "data": {"resultType": "matrix", "result": result}})

    async def prom_instant(self, request: web.Request) -> web.Response:
        self.requests.append(("prom_instant", request.path, dict(request.query)))
        if (query := request.query.get("query", "")).startswith("count(") and self.prom_refuse_counts:
            return web.json_response({"status": "error", "errorType": "execution",
                                      "error": "query processing would load too many samples"}, status=422)
        if query.startswith("count("):  # does any series carry the label?
            found = not any(f'{label}!=""' in query for label in self.prom_missing_labels)
            return web.json_response({"status": "success", "data": {"resultType": "vector", "result": [
                {"metric": {}, "value": [time.time(), "1"]}] if found else []}})
        metric = self._metric_for(request.query.get("query", ""))
        if self.restarted and metric in self.prom_after_restart:
            value = self.prom_after_restart[metric]
        else:
            series = self.prom_series.get(metric) or []
            if not series:
                return web.json_response({"status": "success", "data": {"resultType": "vector", "result": []}})
            value = series[-1]
        warned = {"warnings": self.prom_instant_warnings} if self.prom_instant_warnings else {}
        return web.json_response({"status": "success", **warned, "data": {"resultType": "vector", "result": [
            {"metric": {}, "value": [time.time(), str(value)]}]}})

    # --- Kubernetes -------------------------------------------------------------------------------------

    def simulate(self, sim: Rollouts) -> None:
        """Serve the simulator's Deployment and ReplicaSets, and let PATCHes change them."""
        self.rollouts, self.deployment, self.replica_sets = sim, sim.deployment, sim.replica_sets

    async def deployment_api(self, request: web.Request) -> web.Response:
        body: Any = {}
        if request.method == "PATCH":
            body = await request.json()
        self.requests.append((f"k8s_{request.method}", request.path, body))
        if (denied := self._auth(request)) is not None:
            return denied
        ns, name = request.match_info["ns"], request.match_info["name"]
        meta = self.deployment["metadata"]
        if (ns, name) != (meta["namespace"], meta["name"]):
            return web.json_response({"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
                                      "message": f'deployments.apps "{name}" not found'}, status=404)
        if self.rollouts is not None:
            return self._simulated(request, body, self.rollouts.patch, lambda: self.deployment)
        if request.method == "PATCH":
            if request.content_type not in ("application/strategic-merge-patch+json", "application/merge-patch+json"):
                return web.json_response({"kind": "Status", "code": 415, "message": "unsupported patch type"},
                                         status=415)
            annotations = body["spec"]["template"]["metadata"]["annotations"]
            self.deployment["spec"]["template"]["metadata"]["annotations"].update(annotations)
            meta["generation"] += 1
            self.deployment["status"].update(updatedReplicas=0, availableReplicas=2)
            self.restarted, self._polls = True, 0
            return web.json_response(self.deployment)
        if request.method == "GET":
            self._polls += 1
            ready = self.deployment_ready_after_polls
            status = self.deployment["status"]
            if self.restarted and ready is not None and self._polls >= ready:
                status.update(observedGeneration=meta["generation"], updatedReplicas=3, availableReplicas=3)
            elif self.restarted:
                status.update(observedGeneration=meta["generation"], updatedReplicas=1, availableReplicas=2)
            return web.json_response(self.deployment)
        return web.Response(status=405)

    async def scale_api(self, request: web.Request) -> web.Response:
        body: Any = await request.json() if request.method == "PATCH" else {}
        self.requests.append((f"k8s_scale_{request.method}", request.path, {"body": body}))
        if (denied := self._auth(request)) is not None:
            return denied
        meta = self.deployment["metadata"]
        if self.rollouts is None or (request.match_info["ns"], request.match_info["name"]) != \
                (meta["namespace"], meta["name"]):
            return web.json_response({"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
                                      "message": f'deployments.apps "{request.match_info["name"]}" not found'},
                                     status=404)
        return self._simulated(request, body, self.rollouts.patch_scale, self.rollouts.scale_object)

    def _simulated(self, request: web.Request, body: Any, patch: Any, read: Any) -> web.Response:
        if request.method == "GET":
            return web.json_response(read())
        if request.method != "PATCH":
            return web.Response(status=405)
        if request.content_type not in ("application/json-patch+json", "application/merge-patch+json",
                                        "application/strategic-merge-patch+json"):
            return web.json_response({"kind": "Status", "code": 415, "message": "unsupported patch type"},
                                     status=415)
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        # Who the change is by in managedFields, as the API server names it: the request's fieldManager, else the
        # User-Agent's product name (the Python client's is "OpenAPI-Generator").
        manager = request.query.get("fieldManager") or request.headers.get("User-Agent", "").split("/", 1)[0]
        try:
            answer = patch(body, request.content_type, at, manager)
        except PatchFailed:  # as the API server answers it: which op failed is not said
            return web.json_response({"kind": "Status", "status": "Failure", "reason": "Invalid", "code": 422,
                                      "message": "the server rejected our request due to an error in our request"},
                                     status=422)
        self.restarted = True  # the error rate reads its after-change value from now on
        return web.json_response(answer)

    async def access_review(self, request: web.Request) -> web.Response:
        """``kubectl auth can-i``: the read-only token may get and list, not patch."""
        body = await request.json()
        if (denied := self._auth(request)) is not None:
            return denied
        asked = body["spec"]["resourceAttributes"]
        viewer = request.headers.get("Authorization") == f"Bearer {self.read_only_token}"
        allowed = not (viewer and asked["verb"] == "patch")
        self.requests.append(("k8s_access_review", request.path, asked))
        return web.json_response({**body, "status": {"allowed": allowed,
                                                     "reason": "" if allowed else "no RBAC policy matched"}},
                                 status=201)

    async def replica_set_list(self, request: web.Request) -> web.Response:
        self.requests.append(("k8s_replicasets", request.path, dict(request.query)))
        if (denied := self._auth(request)) is not None:
            return denied
        wanted = dict(p.split("=", 1) for p in request.query.get("labelSelector", "").split(",") if "=" in p)
        items = [rs for rs in self.replica_sets
                 if rs["metadata"]["namespace"] == request.match_info["ns"]
                 and wanted.items() <= rs["metadata"].get("labels", {}).items()]
        return web.json_response({"apiVersion": "apps/v1", "kind": "ReplicaSetList", "metadata": {},
                                  "items": items})

    async def changes(self, request: web.Request) -> web.Response:
        self.requests.append(("changes", request.path, dict(request.query)))
        if (denied := self._auth(request)) is not None:
            return denied
        return web.json_response(self.change_events)

    # --- webhook ---------------------------------------------------------------------------------------

    async def webhook(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(("webhook", request.path, body))
        if (denied := self._auth(request)) is not None:
            return denied
        self.restarted = True
        if self.webhook_answer is not None:
            status, answer = self.webhook_answer
            if isinstance(answer, str):
                return web.Response(text=answer, status=status, content_type="text/html")
            return web.json_response(answer, status=status)
        return web.json_response({"id": "job-42", "status": "queued", "status_url": "jobs/job-42"}, status=202)

    async def job(self, request: web.Request) -> web.Response:
        self.requests.append(("job", request.path, {}))
        if self.job_status != 200:
            return web.Response(text="<html>upstream down</html>", status=self.job_status, content_type="text/html")
        state = self.webhook_states.pop(0) if len(self.webhook_states) > 1 else self.webhook_states[0]
        return web.json_response({"id": request.match_info["job"], "status": state})


def loki_line(ts: float, level: str, msg: str) -> tuple[float, str]:
    return ts, json.dumps({"ts": ts, "level": level, "msg": msg})


def replica_set(revision: int, created: str, image: str, *, cause: str | None = None, restarted_at: str | None = None,
                owner: str = "payments-api", namespace: str = "payments", app: str = "payments-api",
                history: str | None = None) -> dict[str, Any]:
    """A ReplicaSet as the API server returns it for one revision of a deployment's rollout history."""
    annotations = {"deployment.kubernetes.io/revision": str(revision)}
    if cause:
        annotations["kubernetes.io/change-cause"] = cause
    if history:
        annotations["deployment.kubernetes.io/revision-history"] = history
    template: dict[str, Any] = {"labels": {"app": app, "pod-template-hash": f"h{revision}"}}
    if restarted_at:
        template["annotations"] = {"kubectl.kubernetes.io/restartedAt": restarted_at}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": f"{owner}-h{revision}", "namespace": namespace, "creationTimestamp": created,
                         "labels": {"app": app, "pod-template-hash": f"h{revision}"}, "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": owner,
                                              "uid": "d-1", "controller": True}]},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": app, "pod-template-hash": f"h{revision}"}},
                     "template": {"metadata": template,
                                  "spec": {"containers": [{"name": "api", "image": image}]}}},
            "status": {"replicas": 3}}
