"""Toolbox configuration (the ``toolbox:`` section): where the catalog, runbooks, logs, metrics and
restarts come from. Every backend has a demo/file variant so everything runs offline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from core.envs import environment_name

DEFAULT_QUERIES = {
    # "or vector(0)": before a service's first 5xx there is no 5xx series, and the ratio had no points at all
    # (read as data missing, then a "dip" when the first errors came); with traffic and no errors it is 0.
    "error_rate": '(sum(rate(http_requests_total{$labels,code=~"5.."}[5m])) or vector(0))'
                  " / sum(rate(http_requests_total{$labels}[5m]))",
    "p95_latency_ms": "1000 * histogram_quantile(0.95, "
                      "sum by (le) (rate(http_request_duration_seconds_bucket{$labels}[5m])))",
    "restarts": 'sum(increase(kube_pod_container_status_restarts_total{namespace="$namespace"}[15m]))',
}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FileLogs(_Section):
    """Logs from files: <service>-<env>.jsonl or .log (the demo's)."""

    backend: Literal["files"] = "files"
    dir: Path | None = Field(None, description="default: <data_dir>/logs; files named <service>-<env>.jsonl or .log")
    anchor: Literal["now", "latest"] = Field(
        "latest", description="latest: windows end at the newest line (replayed files); now: live files")


class LokiLogs(_Section):
    """Logs from Grafana Loki (LogQL over HTTP)."""

    backend: Literal["loki"]
    url: str = Field(description="Loki's base URL, e.g. http://loki:3100")
    token_env: str | None = Field(None, description="environment variable holding a bearer token")
    tenant: str | None = Field(None, description="X-Scope-OrgID for multi-tenant Loki")
    env_label: str = Field("env", description="the stream label that holds the environment")
    error_filter: str = Field("(?i)(error|exception|fatal|panic|timeout)",
                              description="a line filter (RE2) that picks error lines")
    timeout_s: float = Field(15.0, gt=0, description="per request")


class FixtureMetrics(_Section):
    """Metrics from a YAML file of series (the demo's)."""

    backend: Literal["fixtures"] = "fixtures"
    file: Path | None = Field(None, description="default: <data_dir>/metrics.yml")


class PrometheusMetrics(_Section):
    """Metrics from Prometheus (or anything answering its HTTP query API)."""

    backend: Literal["prometheus"]
    url: str = Field(description="Prometheus' base URL, e.g. http://prometheus:9090")
    token_env: str | None = Field(None, description="environment variable holding a bearer token")
    env_label: str = Field("env", description="the label that holds the environment ($labels)")
    step_s: int = Field(60, ge=1, description="resolution of range queries")
    queries: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_QUERIES),
                                    description="PromQL per metric; $labels, $namespace, $deployment, $env")
    counters: list[str] = Field(default_factory=list, description="metrics whose query returns a raw counter "
                                "(read as increases, resets counted); names ending in _total always are")
    timeout_s: float = Field(15.0, gt=0, description="per request")


class DemoRestarts(_Section):
    """Restarts recorded, not done (the demo)."""

    backend: Literal["demo"] = "demo"


class KubeConnection(_Section):
    """How to reach a Kubernetes API server (shared by the restart and the change-history backends)."""

    in_cluster: bool = Field(False, description="use the pod's service account")
    service_account_dir: Path = Field(Path("/var/run/secrets/kubernetes.io/serviceaccount"),
                                      description="in_cluster: where the service account is mounted")
    kubeconfig: Path | None = Field(None, description="any kubeconfig: token, client certificate, exec plugin, OIDC")
    context: str | None = Field(None, description="kubeconfig: this context instead of the current one")
    api_url: str | None = Field(None, description="explicit API server URL (with token_env)")
    token_env: str | None = Field(None, description="environment variable holding a bearer token (with api_url)")
    ca_file: Path | None = Field(None, description="CA bundle for api_url")
    insecure_skip_tls_verify: bool = Field(False, description="do not verify the API server's certificate")
    timeout_s: float = Field(15.0, gt=0, description="per request")


class KubernetesRestarts(KubeConnection):
    """Restart = a rollout restart of the service's Deployment (kubectl rollout restart), then verified."""

    backend: Literal["kubernetes"]


class WebhookRestarts(_Section):
    """Restart = a POST to your own endpoint (a CI job, a runbook automation)."""

    backend: Literal["webhook"]
    url: str = Field(description="POSTed {service, environment, reason}")
    token_env: str | None = Field(None, description="environment variable holding a bearer token")
    timeout_s: float = Field(15.0, gt=0, description="per request")


class Verification(_Section):
    timeout_s: float = Field(120.0, gt=0, description="how long to wait for the rollout / job")
    poll_s: float = Field(2.0, gt=0, description="how often the rollout / job is looked at")
    settle_s: float = Field(30.0, ge=0, description="pause after the rollout before re-checking the error rate")

    @property
    def budget_s(self) -> float:
        """A change's whole time: the wait and one poll past it, the settle, and the calls around them (the plan
        read again, the error rate before and after, the change, a last read: ~8 calls within their own timeouts).
        A change cut off by it is reported as of unknown outcome, so it must not be shorter than the steps."""
        return self.timeout_s + self.poll_s + self.settle_s + 120


class DemoActions(_Section):
    """Rollbacks and scaling recorded, not done (the demo), among the releases of its change history."""

    backend: Literal["demo"] = "demo"


class KubernetesActions(KubeConnection):
    """The service's Deployment: rollback as kubectl rollout undo, scale by its scale subresource; verified.

    A rollback puts the target ReplicaSet's pod template onto the Deployment with its change-cause recorded."""

    backend: Literal["kubernetes"]


class WebhookActions(_Section):
    """A POST to your own endpoint (a CI/CD job), shaped like the restart webhook's, with action and target."""

    backend: Literal["webhook"]
    url: str = Field(description="POSTed {action, service_id, environment, idempotency_key, requested_by, "
                     "confirmed_by, reason, to_release | to_revision | replicas}")
    token_env: str | None = Field(None, description="environment variable holding a bearer token")
    timeout_s: float = Field(15.0, gt=0, description="per request")


ActionBackend = Annotated[DemoActions | KubernetesActions | WebhookActions, Field(discriminator="backend")]


class Bounds(_Section):
    min: int = Field(ge=0, description="fewest replicas scale_service may set")
    max: int = Field(ge=0, description="most replicas scale_service may set")

    @model_validator(mode="after")
    def _ordered(self) -> Bounds:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        return self


def _default_bounds() -> dict[str, dict[str, Bounds]]:
    return {"*": {"*": Bounds(min=1, max=10)}}


_SCOPE = Field(None, description="the environments this source knows about (default: all)")


class FileChanges(_Section):
    """Deploy events from a JSON lines file."""

    backend: Literal["files"] = "files"
    file: Path | None = Field(None, description="JSON lines of deploy events; default: <data_dir>/changes.jsonl")
    environments: list[str] | None = _SCOPE


class HttpChanges(_Section):
    """Deploy events from your CI/CD over HTTP."""

    backend: Literal["http"]
    url: str = Field(description="GET with ?service=&environment=&since=&until=, answering a JSON list")
    token_env: str | None = Field(None, description="environment variable holding a bearer token")
    timeout_s: float = Field(15.0, gt=0, description="per request")
    environments: list[str] | None = _SCOPE


class KubernetesChanges(KubeConnection):
    """Rollout history of the service's Deployment (its ReplicaSets)."""

    backend: Literal["kubernetes"]
    environments: list[str] | None = _SCOPE


ChangeSource = Annotated[FileChanges | HttpChanges | KubernetesChanges, Field(discriminator="backend")]


def _default_changes() -> list[FileChanges | HttpChanges | KubernetesChanges]:
    return [FileChanges()]


class OpsConfig(_Section):
    data_dir: Path | None = Field(None, description="catalog.yml, docs/, logs/, metrics.yml (default: bundled demo)")
    catalog: Path | None = Field(None, description="the service catalog (default: <data_dir>/catalog.yml)")
    docs_dir: Path | None = Field(None, description="runbooks, Markdown (default: <data_dir>/docs)")
    docs_link_base: str | None = Field(None, description="e.g. https://git.example.com/runbooks/blob/main")
    logs: Annotated[FileLogs | LokiLogs, Field(discriminator="backend")] = Field(
        default_factory=FileLogs, description="where query_logs reads error lines")
    metrics: Annotated[FixtureMetrics | PrometheusMetrics, Field(discriminator="backend")] = Field(
        default_factory=FixtureMetrics, description="where query_metrics reads series")
    restart: Annotated[DemoRestarts | KubernetesRestarts | WebhookRestarts, Field(discriminator="backend")] = Field(
        default_factory=DemoRestarts, description="what restart_service does (confirmed by a person in prod; "
        "tools.restart_service.confirm_in says where). Unset: the demo, which serve and worker refuse without "
        "--demo-data")
    rollback: ActionBackend | None = Field(
        None, description="what rollback_service does (confirmed by a person in every environment; "
        "tools.rollback_service.confirm_in narrows it). Unset: the restart backend's "
        "Kubernetes connection when restart is kubernetes, the demo when restart is the demo; with a restart "
        "webhook, rollbacks are refused (not_configured) until a rollback backend is set")
    scale: ActionBackend | None = Field(None, description="what scale_service does; unset: as for rollback")
    scale_bounds: dict[str, dict[str, Bounds]] = Field(
        default_factory=_default_bounds,
        description="service id ('*' for any) → environment ('*' for any) → {min, max} replicas; the most "
        "specific entry wins; a service and environment no entry covers cannot be scaled")
    changes: list[ChangeSource] = Field(
        default_factory=_default_changes,
        description="where recent_changes reads what changed: one source or a list (merged, newest first)")
    now: AwareDatetime | None = Field(
        None, description="replayed data: the moment treated as now by fixture metrics and file change history "
        "(default: now: in <data_dir>/dataset.yml, else the real clock)")
    verify: Verification = Field(default_factory=Verification)  # after a restart: did it help?

    @field_validator("changes", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @field_validator("scale_bounds")
    @classmethod
    def _folded(cls, value: dict[str, dict[str, Bounds]]) -> dict[str, dict[str, Bounds]]:
        """Environment names as every rule compares them (stripped, case-folded): ``Prod`` bounds ``prod``."""
        out: dict[str, dict[str, Bounds]] = {}
        for service, by_env in value.items():
            out[service] = {}
            for env, bounds in by_env.items():
                name = env if env == "*" else environment_name(env) or env
                if name in out[service]:
                    raise ValueError(f"{service}: environment {name!r} is given twice (as {env!r} too)")
                out[service][name] = bounds
        return out
