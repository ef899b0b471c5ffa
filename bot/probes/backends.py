"""The toolbox as serve would build it, validated as serve validates it (:func:`bot.assembly.validate`), then
every configured backend asked one read-only question: the runbooks folder, logs, metrics, each change source, the
reachability of restart, rollback and scale targets, and the Kubernetes permissions each tool needs."""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any
from urllib.parse import urlsplit

from bot.assembly import DEMO_DATA_FIX, build_toolbox, demo_actions_problem, demo_data_problem, validate
from bot.config import ConfigError, Settings
from bot.probes import PROBE_S, STAGED_S, Check, bounded
from bot.probes.runbooks import runbooks_checks
from core.urls import safe_url
from tools import ops
from tools.ops.logs import LogQuery
from tools.ops.metric_backends import PrometheusBackend
from tools.ops.toolbox import bundled, demo_actions
from tools.ops.toolbox_config import DEFAULT_QUERIES
from tools.tool_errors import ToolError


def _rule_fix(problem: str) -> str:
    if "there is no tool named" in problem:
        return "name a tool `opspilot tools` lists (or remove the rule)"
    if "environment" in problem and "catalog" in problem:
        return "name an environment the catalog has"
    return "see docs/configuration.md for the key"


async def toolbox_checks(settings: Settings, checks: list[Check] | None = None) -> list[Check]:
    """``checks``: where its lines go as they are found, so that a deadline over the whole keeps them."""
    checks, started = [] if checks is None else checks, time.monotonic()
    try:
        toolbox = build_toolbox(settings)
    except ConfigError as exc:
        checks.append(Check("Config", False, str(exc), "fix the toolbox section (serve refuses to start with it)",
                            refused=True))
        return checks
    from tools.mcp import McpHub

    # Each server given at most one probe's time (serve waits its startup_timeout_s), and judged on its own line
    # afterwards: a slow one does not hide the others, nor the backends' lines after it.
    hub = McpHub([c.model_copy(update={"startup_timeout_s": min(c.startup_timeout_s, PROBE_S), "required": False})
                  for c in settings.mcp_servers], retried=False) if settings.mcp_servers else None
    if (demo := demo_data_problem(settings)) is not None:  # serve refuses this: so does check (before any wait)
        checks.append(Check("Data", False, demo, DEMO_DATA_FIX, refused=True))
    acting = demo_actions(settings.toolbox)  # the changing tools' demo backends: demo data as much as its files are
    if acting:
        name, refusal = ", ".join(acting).capitalize(), demo_actions_problem(settings)
        checks.append(Check(name, False, *refusal, refused=True) if refusal else
                      Check(name, True, "the demo backends, on purpose (--demo-data): recorded, not done"))
    try:
        extra: list[Any] = []
        if hub is not None:
            extra = list(await hub.start())
            checks += [_mcp_check(name, h, settings, extra) for name, h in hub.health().items()]
        try:
            _, warnings = validate(settings, toolbox, extra)
        except ConfigError as exc:
            checks.append(Check("Config", False, str(exc), _rule_fix(str(exc)) + " (serve refuses to start with it)",
                                refused=True))
            return checks
        checks += [Check("Config", False, w, _rule_fix(w) + " (serve starts, and warns about it)",
                         required=False) for w in warnings]
        parts = bundled(settings.toolbox) if settings.demo_data else []  # on purpose: said of what it covers
        checks.append(Check("Catalog", True, f"{len(toolbox.catalog.ids)} services, environments "
                                             f"{', '.join(toolbox.catalog.environments)}"
                                             + (f" (the bundled DEMO data for its {', '.join(parts)}, on purpose)"
                                                if parts else "")))
        left = STAGED_S - (time.monotonic() - started) - 0.5  # the backends get what MCP start-up left
        for found in await asyncio.gather(*_probes(settings, toolbox, max(1.0, min(PROBE_S, left)))):
            checks.extend(found)
    finally:
        if hub is not None:
            await hub.stop()
        await toolbox.aclose()  # the Kubernetes connections its probes opened
    return checks


def _probes(settings: Settings, toolbox: ops.Toolbox, deadline_s: float = PROBE_S) -> list[Any]:
    within = functools.partial(bounded, deadline_s=deadline_s)
    conf = settings.toolbox
    logs_fix = (f"check toolbox.logs.url ({safe_url(str(conf.logs.url))}) and its token_env: Loki must answer there"
                if conf.logs.backend == "loki" else "check toolbox.logs.dir: one file per service and environment")
    metrics_fix = (f"check toolbox.metrics.url ({safe_url(str(conf.metrics.url))}) and its token_env: Prometheus "
                   "must answer there"
                   if conf.metrics.backend == "prometheus" else "check toolbox.metrics.file")
    service = toolbox.catalog.services[0] if toolbox.catalog.services else None
    probes: list[Any] = [within("Runbooks", lambda: runbooks_checks(toolbox), fix="check toolbox.docs_dir")]
    if service is not None:
        env = service.environments[0]

        async def logs() -> list[Check]:
            try:
                await toolbox.logs.errors(LogQuery(service, env, minutes=5, limit=1))
            except ToolError as exc:
                return [Check(f"Logs ({conf.logs.backend})", False, exc.message, logs_fix)]
            return [Check(f"Logs ({conf.logs.backend})", True, f"answers for {service.id} in {env}")]

        async def metrics() -> list[Check]:  # every metric: query_metrics reads them all, and fails with any one
            names = toolbox.metrics.names
            found = await asyncio.gather(*(toolbox.metrics.series(service, env, n, 5) for n in names),
                                         return_exceptions=True)
            for name, outcome in zip(names, found, strict=True):
                if isinstance(outcome, ToolError):
                    return [Check(f"Metrics ({conf.metrics.backend})", False, f"{name}: {outcome.message}",
                                  metrics_fix)]
                if isinstance(outcome, BaseException):
                    raise outcome
            if (hidden := await _status_label(toolbox, service, env)) is not None:
                return [hidden]
            empty = [n for n, outcome in zip(names, found, strict=True) if not outcome]
            if empty:  # answered, and matched nothing: a label or a query that names what is not there
                return [Check(f"Metrics ({conf.metrics.backend})", False, f"answers, but no series for {service.id} "
                              f"in {env} in the last 5 minutes: {', '.join(empty)}", "check toolbox.metrics.queries "
                              "and env_label against the series Prometheus has (or the service had no traffic)",
                              required=False)]
            return [Check(f"Metrics ({conf.metrics.backend})", True,
                          f"answers for {service.id} in {env} ({', '.join(names)})")]

        probes += [within(f"Logs ({conf.logs.backend})", logs, fix=logs_fix),
                   within(f"Metrics ({conf.metrics.backend})", metrics, fix=metrics_fix)]
        probes += [within(f"Change history ({source.name})", _changes(source, service, toolbox),
                           fix="check toolbox.changes") for source in toolbox.changes]
    for key in ("restart", "rollback", "scale"):
        url = getattr(getattr(conf, key, None), "url", None)
        if isinstance(url, str):
            probes.append(within(f"{key.capitalize()} webhook", _reach(key, url), fix=f"check toolbox.{key}.url"))
    from bot.probes.kube_probe import kubernetes_checks

    probes.append(within("Kubernetes permissions", lambda: kubernetes_checks(toolbox),
                          fix="check the cluster API address and credentials in the toolbox section"))
    return probes


async def _status_label(toolbox: ops.Toolbox, service: Any, env: str) -> Check | None:
    """The default error-rate query counts 5xx by the ``code`` label (0 where none match, so a service with no errors
    reads 0): requests labelled otherwise (``status``) would read 0% whatever fails."""
    metrics = toolbox.metrics
    if not isinstance(metrics, PrometheusBackend) or metrics.queries.get("error_rate") != DEFAULT_QUERIES["error_rate"]:
        return None
    query = metrics.render('count(http_requests_total{$labels,code!=""})', service, env)
    try:
        hidden = await metrics.instant(metrics.render("count(http_requests_total{$labels})", service, env)) and \
            not await metrics.instant(query)
    except ToolError:  # a side question serve never asks: unanswered, it is no failure of the metrics
        return None
    if hidden:
        return Check("Metrics (prometheus)", False, f"http_requests_total for {service.id} in {env} has no `code` "
                     "label, which the default error_rate query counts 5xx by: it would read 0% whatever fails",
                     "set toolbox.metrics.queries.error_rate to your labels (e.g. status=~\"5..\")")
    return None


def _mcp_check(name: str, health: dict[str, Any], settings: Settings, specs: list[Any]) -> Check:
    """A server as serve would take it: one it may start without (``required: false``) is a warning, one it may not
    is refused as serve refuses it — unless only check's shorter wait ran out; one that is up with none of its tools
    usable (names or schemas left out) is not working. Up means it listed its tools: none was called (a call may
    act), so what stands behind it (its Prometheus, its Alertmanager) is not known here."""
    config = next(c for c in settings.mcp_servers if c.name == name)
    usable = sum(1 for spec in specs if spec.name.startswith(f"{name}__"))
    error = str(health.get("error") or "")
    ok = health["state"] == "up"
    state = "did not start" if health["state"] == "starting" else str(health["state"])
    says = f"up, {usable} tools (none called: whatever stands behind the server is not checked here)" if ok else \
        f"{state} ({error})" if error else state
    if ok and health.get("tools") and not usable:
        ok, says = False, f"up, but none of its {health['tools']} tools can be used (left out by allow/deny, or " \
                          "for invalid names or schemas: see the log)"
    cut_short = not ok and "did not answer within" in error and config.startup_timeout_s > PROBE_S
    if cut_short:
        says += f"; serve waits up to its startup_timeout_s ({config.startup_timeout_s:g}s)"
    return Check(f"MCP server {name}", ok, says, "see its command, args and env in mcp_servers",
                 required=config.required, refused=config.required and not ok and not cut_short)


def _changes(source: Any, service: Any, toolbox: ops.Toolbox) -> Any:
    async def probe() -> list[Check]:
        env = next((e for e in service.environments if source.serves(e)), None)
        if env is None:
            return []
        name = f"Change history ({source.name})"
        try:
            await source.changes(service, env, 0.0, toolbox.clock.now())
        except ToolError as exc:
            return [Check(name, False, exc.message, "check this source's url, file or credentials under "
                          "toolbox.changes", required=exc.code != "not_configured")]
        return [Check(name, True, "answers")]
    return probe


def _reach(key: str, url: str) -> Any:
    """A webhook is never called here (a POST would act): its host accepting a connection is what can be known."""
    async def probe() -> list[Check]:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
        name = f"{key.capitalize()} webhook"
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError as exc:
            return [Check(name, False, f"{host}:{port} does not accept connections ({exc.strerror or exc})",
                          f"check toolbox.{key}.url and the network path to it")]
        writer.close()
        return [Check(name, True, f"{host}:{port} accepts connections (not called: it would act)")]
    return probe
