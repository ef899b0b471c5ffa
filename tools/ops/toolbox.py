"""The ops tools (rollback and scaling in tools/ops/changing.py), bound to the backends the config chooses."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tools.ops import toolbox_config as cfg
from tools.ops.catalog import Catalog, Service
from tools.ops.change_summary import recent, releases
from tools.ops.changes import Change, ChangeSource, DemoMade, FileChanges, HttpChanges
from tools.ops.changing import Changing, verdict, warnings_of
from tools.ops.changing import error_rate as _error_rate
from tools.ops.clock import Clock
from tools.ops.docs import DocIndex
from tools.ops.http import Http
from tools.ops.kube import KubeClient
from tools.ops.logs import FileBackend, LogBackend, LogQuery, LokiBackend, group
from tools.ops.metric_backends import FixtureBackend, MetricsBackend, PrometheusBackend
from tools.ops.releases import DemoActions, Unconfigured, WebhookActions
from tools.ops.restart import (
    DemoRestarts,
    KubernetesRestarts,
    RestartBackend,
    RestartRequest,
    WebhookRestarts,
    followed,
)
from tools.ops.rollback import KubernetesActions
from tools.ops.rollouts import KubernetesChanges
from tools.ops.series import describe, figures, gist
from tools.registry import ToolContext, ToolSpec, confirm_in, tool
from tools.tool_errors import InvalidArguments, NotFound, ParamsRequired

log = logging.getLogger(__name__)

DEMO_DATA = Path(__file__).resolve().parents[2] / "examples" / "demo"


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchResourceArgs(_Args):
    query: str = Field(min_length=1, max_length=200,
                       description="service name, id or alias, in any language; * lists every service")


class SearchDocsArgs(_Args):
    query: str = Field(min_length=1, max_length=500, description="what to look for in the runbooks, any language")
    limit: int = Field(3, ge=1, le=10)


class ServiceArgs(_Args):
    service_id: str | None = Field(None, description="the service id from search_resource")
    environment: str | None = Field(None, description="e.g. prod or staging")


WINDOWS = {"query_logs": (1, 24 * 60), "query_metrics": (5, 7 * 24 * 60), "recent_changes": (5, 30 * 24 * 60)}
"""How far back each read may look, in minutes (least, most)."""


class QueryLogsArgs(ServiceArgs):
    minutes: int = Field(60, ge=WINDOWS["query_logs"][0], le=WINDOWS["query_logs"][1], description="how far back")
    contains: str | None = Field(None, max_length=200, description="only lines containing this text")


class QueryMetricsArgs(ServiceArgs):
    metrics: list[str] | None = Field(None, description="which metrics (default: all configured)")
    minutes: int = Field(60, ge=WINDOWS["query_metrics"][0], le=WINDOWS["query_metrics"][1])


class RecentChangesArgs(ServiceArgs):
    minutes: int = Field(24 * 60, ge=WINDOWS["recent_changes"][0], le=WINDOWS["recent_changes"][1],
                         description="how far back (default: 24 hours)")


class RestartArgs(_Args):
    service_id: str = Field(min_length=1, description="the service id from search_resource")
    environment: str | None = Field(None, description="where to restart")
    reason: str = Field("", max_length=500, description="why, in one sentence")


@dataclass
class Toolbox:
    specs: list[ToolSpec]
    catalog: Catalog
    docs: DocIndex
    logs: LogBackend
    metrics: MetricsBackend
    restarts: Any  # a RestartBackend; DemoRestarts in the demo, whose .done tests read
    changes: list[ChangeSource]
    clock: Clock
    rollbacks: Any = None  # a RollbackBackend; DemoActions in the demo, whose .done tests read
    scaling: Any = None  # a ScaleBackend

    async def aclose(self) -> None:
        """Let go of the Kubernetes API's connections (the HTTP backends open one per request and close it)."""
        held = (getattr(backend, "kube", None) for backend in (self.restarts, self.rollbacks, self.scaling,
                                                                  *self.changes))
        for kube in {id(k): k for k in held if isinstance(k, KubeClient)}.values():
            await kube.close()


def _token(env: str | None) -> str | None:
    """The bearer token ``token_env`` names. Named and not set: refused at start — the backend would be called with
    no credentials mid-incident (refused, or worse, let through somewhere open)."""
    if not env:
        return None
    if not os.environ.get(env):
        raise ValueError(f"token_env names {env}, which is not set (or empty): set it, or remove token_env")
    return os.environ[env]


def _logs(conf: cfg.OpsConfig, data: Path) -> LogBackend:
    if isinstance(conf.logs, cfg.LokiLogs):
        headers = {"X-Scope-OrgID": conf.logs.tenant} if conf.logs.tenant else None
        http = Http(conf.logs.url, name="Loki", token=_token(conf.logs.token_env), timeout_s=conf.logs.timeout_s,
                    headers=headers)
        return LokiBackend(http, env_label=conf.logs.env_label, error_filter=conf.logs.error_filter)
    return FileBackend(conf.logs.dir or data / "logs", anchor=conf.logs.anchor)


def _metrics(conf: cfg.OpsConfig, data: Path, clock: Clock) -> MetricsBackend:
    if isinstance(conf.metrics, cfg.PrometheusMetrics):
        m = conf.metrics
        http = Http(m.url, name="Prometheus", token=_token(m.token_env), timeout_s=m.timeout_s)
        return PrometheusBackend(http, queries=m.queries, env_label=m.env_label, step_s=m.step_s,
                                 counters=m.counters)
    return FixtureBackend(conf.metrics.file or data / "metrics.yml", now=clock.now)


def _kube(r: cfg.KubeConnection) -> KubeClient:
    return KubeClient(in_cluster=r.in_cluster, service_account=r.service_account_dir, kubeconfig=r.kubeconfig,
                      context=r.context, api_url=r.api_url, token=_token(r.token_env), ca_file=r.ca_file,
                      insecure=r.insecure_skip_tls_verify, timeout_s=r.timeout_s)


def _changes(conf: cfg.OpsConfig, data: Path) -> list[ChangeSource]:
    sources: list[ChangeSource] = []
    for c in conf.changes:
        if isinstance(c, cfg.KubernetesChanges):
            sources.append(KubernetesChanges(_kube(c), c.environments))
        elif isinstance(c, cfg.HttpChanges):
            sources.append(HttpChanges(Http(c.url, name="deploy events API", token=_token(c.token_env),
                                            timeout_s=c.timeout_s), c.environments))
        else:
            sources.append(FileChanges(c.file or data / "changes.jsonl", c.environments))
    return sources


def _restarts(conf: cfg.OpsConfig) -> RestartBackend:
    r = conf.restart
    if isinstance(r, cfg.KubernetesRestarts):
        return KubernetesRestarts(_kube(r))
    if isinstance(r, cfg.WebhookRestarts):
        return WebhookRestarts(Http(r.url, name="restart webhook", token=_token(r.token_env), timeout_s=r.timeout_s),
                               r.url)
    return DemoRestarts()


def _actions(conf: cfg.OpsConfig, chosen: cfg.ActionBackend | None, what: str, sources: list[ChangeSource],
             clock: Clock) -> Any:
    """rollback and scale: as configured; unset, the restart backend's Kubernetes connection or the demo. A
    restart webhook is never assumed to roll back or scale: unset then, the tool says it is not configured."""
    if chosen is None:
        restart = conf.restart
        if isinstance(restart, cfg.KubernetesRestarts):
            return KubernetesActions(_kube(restart))
        if isinstance(restart, cfg.WebhookRestarts):
            return Unconfigured(what)
        chosen = cfg.DemoActions()

    async def history(service: Service, env: str) -> list[Change]:
        return await releases(sources, service, env, clock.now())

    if isinstance(chosen, cfg.KubernetesActions):
        return KubernetesActions(_kube(chosen))
    if isinstance(chosen, cfg.WebhookActions):
        return WebhookActions(Http(chosen.url, name=f"{what} webhook", token=_token(chosen.token_env),
                                   timeout_s=chosen.timeout_s), chosen.url, history)
    return DemoActions(history)


def bundled(conf: cfg.OpsConfig) -> list[str]:
    """The parts of the toolbox that would read the bundled demo data (examples/demo), as the config says."""
    data = (conf.data_dir or DEMO_DATA).resolve()
    files = {"catalog": conf.catalog or data / "catalog.yml", "runbooks": conf.docs_dir or data / "docs"}
    if isinstance(conf.logs, cfg.FileLogs):
        files["logs"] = conf.logs.dir or data / "logs"
    if isinstance(conf.metrics, cfg.FixtureMetrics):
        files["metrics"] = conf.metrics.file or data / "metrics.yml"
    for c in conf.changes:
        if isinstance(c, cfg.FileChanges):
            files["change history"] = c.file or data / "changes.jsonl"
    demo = DEMO_DATA.resolve()
    return [part for part, path in files.items() if path.resolve().is_relative_to(demo)]


def demo_actions(conf: cfg.OpsConfig) -> list[str]:
    """The changing tools (restart, rollback, scale) the config leaves on the demo backends, which record a confirmed
    change and report it done while nothing changes: restart unset is the demo, and rollback and scale follow it."""
    follows = isinstance(conf.restart, cfg.DemoRestarts)
    return (["restart"] if follows else []) + [
        what for what in ("rollback", "scale") if isinstance(getattr(conf, what), cfg.DemoActions)
        or (getattr(conf, what) is None and follows)]


def build(conf: cfg.OpsConfig | None = None, *, restarts: Any = None) -> Toolbox:
    conf = conf or cfg.OpsConfig()
    data = conf.data_dir or DEMO_DATA
    catalog = Catalog.load(conf.catalog or data / "catalog.yml")
    # Indexed at the first search, in its thread (DocIndex.search): a large docs folder does not delay a
    # worker's first read of the queue.
    docs = DocIndex(conf.docs_dir or data / "docs", link_base=conf.docs_link_base)
    # The bundled data's replayed clock only where its files are read: live backends are asked about now.
    clock = Clock.for_data(conf.now, data if conf.data_dir is not None or bundled(conf) else None)
    logs = _logs(conf, data)
    metrics = _metrics(conf, data, clock)
    changes = _changes(conf, data)
    backend: RestartBackend = restarts or _restarts(conf)
    if isinstance(backend, DemoRestarts) and isinstance(metrics, FixtureBackend):
        # Demo fixtures switch to their after-restart series once the demo backend restarted a service.
        backend.listeners.append(lambda service, env: metrics.restarted.add((service, env)))
    made = DemoMade(clock.now)  # what the demo backends do: in the change history, as a real one shows it
    if isinstance(backend, DemoRestarts):
        backend.listeners.append(lambda service, env: made.add(service, env, "restart",
                                                               description="rollout restart"))
    verify = conf.verify

    def service_and_env(args: ServiceArgs, what: str) -> tuple[Service, str]:
        missing: dict[str, list[str] | None] = {}
        service = catalog.get(args.service_id) if args.service_id else None
        if args.service_id and service is None:
            raise NotFound(f"unknown service id {args.service_id!r}; known: {', '.join(catalog.ids)}")
        if service is None:
            missing["service_id"] = catalog.ids
        if args.environment is None:
            missing["environment"] = service.environments if service else catalog.environments
        if missing:
            raise ParamsRequired(f"choose {' and '.join(missing)} to {what}", missing)
        assert service is not None and args.environment is not None
        if args.environment not in service.environments:
            raise InvalidArguments(f"{service.id} has no environment {args.environment!r}; "
                                   f"it has {', '.join(service.environments)}")
        return service, args.environment

    @tool(timeout_s=5)
    async def search_resource(args: SearchResourceArgs, ctx: ToolContext) -> dict[str, Any]:
        """Find services in the service catalog by name, id or alias (any language, e.g. 支付服务 or pay-svc).
        Returns candidates with ids, owning team, environments, runbooks and recent alerts; several candidates
        with the same score mean the query was ambiguous. The query ``*`` lists every service (a question that
        names none: "what happened at 09:11?", "did anything change in staging?")."""
        if args.query.strip() == "*":
            return {"ambiguous": False, "listing": True,
                    "candidates": [{"score": 0.0, "matched": "*", **s.card()} for s in catalog.services[:50]],
                    "more_services": max(len(catalog.services) - 50, 0)}
        hits = catalog.search(args.query)
        if not hits:
            near = catalog.suggest(args.query)
            maybe = f"did you mean {' or '.join(f'{s.name} ({s.id})' for s in near)}? " if near else ""
            raise NotFound(f"no service is named {args.query!r} (by id, name or alias); {maybe}"
                           f"known services: {', '.join(catalog.ids)}")  # for people too: the card quotes it
        top = hits[0].score
        return {"ambiguous": sum(1 for h in hits if h.score == top) > 1,
                "candidates": [{"score": h.score, "matched": h.matched, **h.service.card()} for h in hits[:5]]}

    @tool(timeout_s=10)
    async def search_docs(args: SearchDocsArgs, ctx: ToolContext) -> dict[str, Any]:
        """Search the runbooks (Chinese and English) and return the best matching sections, ranked, with the
        document title, the section heading and its path or link."""
        hits = await docs.search(args.query, args.limit)
        return {"results": [{"score": h.score, "title": h.title, "section": h.section, "path": h.path,
                             "text": h.text} for h in hits]}

    @tool(timeout_s=30)
    async def query_logs(args: QueryLogsArgs, ctx: ToolContext) -> dict[str, Any]:
        """Recent error logs of a service in one environment, grouped by message pattern with counts, first and
        last seen, and a few samples. Also returns the query it ran."""
        service, env = service_and_env(args, "read the logs")
        q = LogQuery(service, env, args.minutes, args.contains)
        lines = await logs.errors(q)
        patterns = group(lines)
        top = f"; top: {patterns[0]['pattern'][:80]} ×{patterns[0]['count']}" if patterns else ""
        capped = len(lines) >= q.limit  # the newest lines only: counts and "first seen" cover just these
        note = f" (the newest {q.limit} only: there are more, so counts and first-seen times are partial)" \
            if capped else ""
        return {"service_id": service.id, "environment": env, "window_minutes": args.minutes,
                "query": logs.describe(q), "error_lines": len(lines), "limit_reached": capped,
                "patterns": patterns[:10], "more_patterns": max(len(patterns) - 10, 0),
                "summary": f"{len(lines)} error lines{note}{top}"}

    @tool(timeout_s=30)
    async def query_metrics(args: QueryMetricsArgs, ctx: ToolContext) -> dict[str, Any]:
        """Key metrics of a service in one environment over a window (error rate, p95 latency in ms, restarts).
        Per metric: current value, baseline (before any change), peak (or low) and when, onset (when it
        clearly left the baseline, UTC) and recovery time if it came back, and a trend word from those facts
        (flat, rising, falling, steady high, spiked and recovered…), with the query used. When it came back and
        rose again, these are the rise under way's; excursions, earlier_onset_at and earlier_recovered_at tell
        the ones before it. Compare onset_at with recent_changes to tell whether a change preceded a problem."""
        service, env = service_and_env(args, "read the metrics")
        names = args.metrics or metrics.names
        unknown = [n for n in names if n not in metrics.names]
        if unknown:
            raise InvalidArguments(f"unknown metrics {unknown}; available: {', '.join(metrics.names)}")
        window = metrics.span(args.minutes)
        series = await asyncio.gather(*(metrics.series(service, env, n, args.minutes) for n in names))
        shapes = {n: describe(s, counter=metrics.is_counter(n), window=window)
                  for n, s in zip(names, series, strict=True)}
        warned = {n: list(w) for n, s in zip(names, series, strict=True) if (w := getattr(s, "warnings", ()))}
        return {"service_id": service.id, "environment": env, "window_minutes": args.minutes,
                "metrics": {n: {**figures(sh), "query": metrics.describe(service, env, n),
                                **({"backend_warnings": warned[n]} if n in warned else {})}
                            for n, sh in shapes.items()},
                "summary": ", ".join(gist(n, sh) + (f" (partial data: {warned[n][0]})" if n in warned else "")
                                     for n, sh in shapes.items())}

    @tool(timeout_s=30)
    async def recent_changes(args: RecentChangesArgs, ctx: ToolContext) -> dict[str, Any]:
        """What changed for a service in one environment in a window, newest first: deploys and rollouts
        (version or revision, time in UTC, images, change cause, author) from the deploy pipeline's events and
        the Kubernetes rollout history, plus the last change before the window. Use it for "was it the deploy?":
        put the change times beside the onset query_metrics reports. Sources that could not be read are listed
        under unavailable: "no changes" only holds for the sources that answered."""
        service, env = service_and_env(args, "look at its changes")
        # What the demo backends did, once they did something: an empty one is no source that "answered".
        return await recent([*changes, made] if made.made else changes, service, env, args.minutes, clock.now())

    def named(args: RestartArgs) -> None:
        """Before the gate: a Confirm card must not offer a service or environment the catalog lacks (what is
        missing is still asked for by the tool, with its choices)."""
        service = catalog.get(args.service_id)
        if service is None:
            raise NotFound(f"unknown service id {args.service_id!r}; known: {', '.join(catalog.ids)}")
        if args.environment is not None and args.environment not in service.environments:
            raise InvalidArguments(f"{service.id} has no environment {args.environment!r}; "
                                   f"it has {', '.join(service.environments)}")

    @tool(mutating=True, confirm=confirm_in("prod"), check=named,
          timeout_s=verify.budget_s)
    async def restart_service(args: RestartArgs, ctx: ToolContext) -> dict[str, Any]:
        """Rolling-restart a service in one environment, then verify: wait for the rollout to finish and compare
        the error rate before and after. Changes production state: a person must confirm it in prod."""
        service, env = service_and_env(ServiceArgs(service_id=args.service_id, environment=args.environment),
                                       f"restart {args.service_id}")
        before = await _error_rate(metrics, service, env)
        req = RestartRequest(service, env, ctx.idempotency_key, ctx.user_id, ctx.confirmed_by, args.reason)
        action = await backend.restart(req)
        rollout = await followed(backend.wait(req, action, verify.timeout_s, verify.poll_s))
        after: float | str | None = None
        if rollout.status == "complete":
            if backend.settles and verify.settle_s:
                await asyncio.sleep(verify.settle_s)
            after = await _error_rate(metrics, service, env)
        return {"service_id": service.id, "environment": env, "backend": backend.name, "action": action,
                "rollout": rollout.status, "rollout_detail": rollout.detail, "waited_s": rollout.waited_s,
                "error_rate_before": before, "error_rate_after": after,
                **({"error_rate_warnings": w} if (w := warnings_of(before, after)) else {}),
                "verdict": verdict(("restart", "restarted"), rollout, before, after), "confirmed_by": ctx.confirmed_by}

    rollbacks = _actions(conf, conf.rollback, "rollback", changes, clock)  # planned from releases, not `made`
    scaling = _actions(conf, conf.scale, "scale", changes, clock)
    for actions in (rollbacks, scaling):
        if isinstance(actions, DemoActions):
            actions.made = made
    changing = Changing(
        lambda sid, env, what: service_and_env(ServiceArgs(service_id=sid, environment=env), what),
        named, metrics, rollbacks, scaling, verify, conf.scale_bounds)
    specs = [search_resource, search_docs, query_logs, query_metrics, recent_changes, restart_service,
             *changing.specs()]
    return Toolbox(specs, catalog, docs, logs, metrics, backend, changes, clock, rollbacks, scaling)
