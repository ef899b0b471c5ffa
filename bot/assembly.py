"""Putting an engine together from settings: model, tools, store."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from bot.agent.deps import RunDeps
from bot.agent.engine import Engine, EngineOptions
from bot.agent.events import EventBus
from bot.agent.models.base import ChatModel, label_of
from bot.agent.models.unloaded import Unloaded
from bot.agent.sweeps import Sweeps
from bot.config import ConfigError, Settings, environment_problems
from bot.config_errors import suggest
from bot.followup_tool import Followups, followup_tool
from core.envs import environment_name
from state import Keys, MemoryStore, RedisStore, StoreError, Ttls, connect
from state.client import refusal, safe_url
from state.store import MetaStore, Outbox, Reports, Store, WorkQueue
from tools import ops
from tools.mcp import McpHub, McpStartupError
from tools.ops.toolbox import bundled, demo_actions
from tools.plugins import PluginError, load_plugins
from tools.registry import ConfirmPolicy, InEnvironments, Registry, ToolSpec, always, never
from tools.tool_errors import ToolError

if TYPE_CHECKING:  # imported only when traces are on
    from bot.telemetry import Telemetry

log = logging.getLogger(__name__)

DEFAULT_MODELS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4o-mini"}


def model_choice(settings: Settings) -> tuple[str, str]:
    """The provider and model name serve would use (``("scripted", "demo")`` for the demo model), or the
    ConfigError it would stop with. ``opspilot check`` probes exactly this."""
    llm = settings.llm
    has_anthropic = bool(os.environ.get("ANTHROPIC_API_KEY"))  # an empty variable is unset, as everywhere
    has_openai = bool(os.environ.get("OPENAI_API_KEY"))
    provider = llm.provider
    if provider == "auto":
        provider = "anthropic" if has_anthropic else "openai" if has_openai else "scripted"
    if provider == "scripted":
        if llm.provider == "scripted" and (has_anthropic or has_openai):
            raise ConfigError("llm.provider is 'scripted' but an API key is configured; "
                              "unset the key or choose provider 'auto', 'anthropic' or 'openai'")
        return "scripted", "demo"
    if provider == "anthropic" and not has_anthropic:
        raise ConfigError("llm.provider is 'anthropic' but ANTHROPIC_API_KEY is not set")
    if provider == "openai" and not has_openai:
        raise ConfigError("llm.provider is 'openai' but OPENAI_API_KEY is not set")
    return provider, llm.name or DEFAULT_MODELS[provider]


def build_model(settings: Settings, *, load: bool = True) -> ChatModel:
    """The configured model. ``load=False`` (a front, which never runs one): its name only, no SDK imported."""
    llm = settings.llm
    provider, name = model_choice(settings)
    if provider == "scripted":  # the offline demo: its answers and their data, only where it is the model
        from bot.agent.models.demo import demo_model

        return demo_model(llm.scripted_latency_s)
    if not load:
        return Unloaded(label_of(provider, name))
    # The SDKs take seconds to import: load only the one in use.
    if provider == "anthropic":
        from bot.agent.models.anthropic import AnthropicModel

        return AnthropicModel(name, max_tokens=llm.max_tokens, timeout_s=llm.timeout_s, max_retries=llm.max_retries)
    from bot.agent.models.openai import OpenAIModel

    return OpenAIModel(name, max_tokens=llm.max_tokens, timeout_s=llm.timeout_s, max_retries=llm.max_retries,
                       token_field=llm.token_field)


def build_toolbox(settings: Settings) -> ops.Toolbox:
    try:
        return ops.build(settings.toolbox)
    except (ops.CatalogError, ValueError, ToolError) as exc:
        raise ConfigError(f"toolbox: {exc}") from exc


DEMO_DATA_FIX = ("point each at your own in opspilot.yml (toolbox.catalog, docs_dir, logs, metrics, changes; or "
                 "toolbox.data_dir for the files: docs/configuration.md), or pass --demo-data (OPSPILOT_DEMO_DATA=1) "
                 "to serve the demo data on purpose")


def demo_data_problem(settings: Settings) -> str | None:
    """Why ``serve``/``worker`` must not start: they would answer on-call questions from the bundled demo data
    (nothing in the config points the toolbox elsewhere) — unless ``demo_data`` says that is the point."""
    parts = [] if settings.demo_data else bundled(settings.toolbox)
    if not parts:
        return None
    return (f"the toolbox would answer from the bundled demo data (examples/demo, fictional, on a replayed clock), "
            f"not your systems: its {', '.join(parts)}")


def demo_actions_problem(settings: Settings) -> tuple[str, str] | None:
    """Why ``serve``/``worker`` must not start, and the fix: a confirmed restart, rollback or scale would run the
    demo backends (the config sets none of its own) and be reported done while nothing changed — unless
    ``demo_data`` says that is the point."""
    parts = [] if settings.demo_data else demo_actions(settings.toolbox)
    if not parts:
        return None
    conf = settings.toolbox  # restart set fixes what follows it; a rollback or scale set to the demo is named
    named = [p for p in parts if p == "restart" or getattr(conf, p) is not None]
    return (f"{', '.join(f'{p}_service' for p in parts)} would use the demo backends: a confirmed change is recorded "
            "and reported done, and nothing in your systems changes",
            f"set {' and '.join(f'toolbox.{p}' for p in named)} (backend: kubernetes or webhook; docs/configuration.md)"
            ", or pass --demo-data (OPSPILOT_DEMO_DATA=1) to use the demo backends on purpose")


def demo_note(settings: Settings) -> str:
    """What serve's banner says of ``--demo-data``: the demo data, and the changing tools it leaves on the demo."""
    if not settings.demo_data:
        return ""
    acting = demo_actions(settings.toolbox)
    return "; answering from the bundled DEMO data (--demo-data), not your systems" + (
        f"; {', '.join(acting)} recorded, not done (the demo backends)" if acting else "")


def asks(policy: ConfirmPolicy, environment: str) -> bool | None:
    """Whether ``policy`` asks a person about a call in ``environment``; None when the environment alone does not
    tell (the rule reads other arguments)."""
    if policy is always or policy is never:
        return policy is always
    if isinstance(policy, InEnvironments) and policy.field == "environment":
        return policy(SimpleNamespace(environment=environment))
    return None


def loosened(settings: Settings, environments: list[str], registry: Registry,
             defaults: dict[str, ConfirmPolicy]) -> list[str]:
    """What serve starts with but says: ``tools.<name>.confirm_in`` leaving out an environment its tool asks about
    by default (a change there runs with no person's confirmation), and an approvers rule the gate never reaches
    outside an alert's run (it reads as protection that is not there)."""
    warnings: list[str] = []
    folded = {n for e in environments if (n := environment_name(e))}
    for name in registry.names():  # a default rule the catalog never matches asks in every environment: said
        rule = getattr(registry.get(name), "needs_confirmation", None)
        if isinstance(rule, InEnvironments) and rule.field == "environment" and not rule.environments & folded:
            warnings.append(f"{name} asks for a person's confirmation in every environment: its rule names "
                            f"{', '.join(sorted(rule.environments))}, which the catalog has none of "
                            f"({', '.join(environments)}); set tools.{name}.confirm_in to the ones that need it")
    for name in settings.tools:
        spec, before = registry.get(name), defaults.get(name)
        dropped = [e for e in environments if spec is not None and before is not None
                   and asks(before, e) is True and asks(spec.needs_confirmation, e) is False]
        if dropped:
            warnings.append(f"tools.{name}.confirm_in leaves {', '.join(dropped)} out: {name} runs there with no "
                            "person's confirmation, which it asks for by default")
    for tool, by_env in settings.slack.approvers.items():
        spec = registry.get(tool)
        for env in by_env:
            if spec is not None and not spec.mutating:
                warnings.append(f"slack.approvers.{tool}: {tool} is read-only: nobody is asked to confirm it")
                break
            if spec is not None and env != "*" and asks(spec.needs_confirmation, env) is False:
                warnings.append(f"slack.approvers.{tool}.{env}: {tool} asks for a confirmation in {env} only in an "
                                f"alert's run (tools.{tool}.confirm_in): elsewhere it runs with no one's")
    return warnings


def validate(settings: Settings, toolbox: ops.Toolbox, extra: Sequence[ToolSpec] = ()) -> tuple[Registry, list[str]]:
    """The one validation ``serve`` (through :func:`assemble`) and ``opspilot check`` share: the registry, or the
    ConfigError serve stops with (among them rules that can never match: they fail closed); and the problems serve
    starts with but warns about (a verification that cannot fit the run's time)."""
    try:
        registry = Registry.of([*toolbox.specs, *load_plugins(settings.plugins, {}), *extra])
    except (PluginError, ValueError) as exc:
        raise ConfigError(str(exc)) from exc
    defaults = {name: spec.needs_confirmation for name in registry.names() if (spec := registry.get(name))}
    for name, policy in settings.tools.items():
        if name not in registry:
            raise ConfigError(f"tools.{name}: there is no tool named {name!r}{suggest(name, registry.names())}")
        if policy.confirm_in is not None:
            try:
                registry.require_confirmation_in(name, policy.confirm_in)
            except ValueError as exc:
                raise ConfigError(f"tools.{name}.confirm_in: {exc}") from exc
    registry.know_environments(toolbox.catalog.environments)
    if problems := environment_problems(settings, toolbox.catalog.environments, registry.names(),
                                        toolbox.catalog.ids):
        raise ConfigError("\n".join(problems))
    warnings = loosened(settings, toolbox.catalog.environments, registry, defaults)
    verify = settings.toolbox.verify
    if verify.timeout_s + verify.settle_s >= settings.limits.max_wall_time_s:
        warnings.append(f"toolbox.verify ({verify.timeout_s:g}s + {verify.settle_s:g}s settle) does not fit "
                        f"limits.max_wall_time_s ({settings.limits.max_wall_time_s:g}s): a restart run inside the "
                        "loop may be stopped before it is verified")
    return registry, warnings


def build_registry(settings: Settings, toolbox: ops.Toolbox, extra: Sequence[ToolSpec] = ()) -> Registry:
    registry, warnings = validate(settings, toolbox, extra)
    for problem in warnings:
        log.warning("config: %s", problem)
    return registry


async def _warn_if_evicting(store: RedisStore) -> None:
    """Loudly, at every start: an evicting Redis silently drops paused runs and transcripts (on a Cluster, any
    primary or replica of one: each holds its slots' keys)."""
    from redis.asyncio.cluster import RedisCluster

    client = store.client
    targets: list[dict[str, Any]] = [{"target_nodes": n} for n in client.get_nodes()] \
        if isinstance(client, RedisCluster) else [{}]
    for target in targets:
        try:
            info = await client.info("memory", **target)
        except Exception as exc:  # CONFIG/INFO forbidden by a provider: `opspilot check` says what it can
            log.info("Redis's eviction policy not read (%s): `opspilot check` says what it can", exc)
            return
        policy = str(info.get("maxmemory_policy", "noeviction")) if isinstance(info, dict) else "noeviction"
        if policy != "noeviction":
            node = target["target_nodes"].name if target else "Redis"
            log.warning("!!! Redis maxmemory-policy is %s (%s): under memory pressure it EVICTS keys, and paused runs, "
                        "transcripts and the outbox go with them. Set maxmemory-policy noeviction.", policy, node)
            return


async def open_store(settings: Settings, *, fallback: bool, wait_s: float = 0.0,
                     reading: bool = False) -> RedisStore | MemoryStore:
    """Redis when it answers; otherwise (if allowed) the in-process store, which is not durable. ``wait_s``: how long
    a Redis out of reach is asked again (a pod starting in an outage waits, rather than crash-looping).
    ``reading``: only read from it (``stats``, ``report``: a replica answers them), so no key layout is migrated."""
    keys, ttls = Keys(settings.key_prefix), Ttls(thread_s=settings.thread_ttl_s, interrupt_s=settings.interrupt_ttl_s)
    store = RedisStore(connect(settings.redis_url, timeout_s=2.0), keys=keys, ttls=ttls,
                       outage_grace_s=settings.redis_outage_grace_s)
    deadline, pause = time.monotonic() + wait_s, 1.0
    try:
        while True:
            try:
                await store.ping()
                break
            except StoreError as exc:
                if refusal(exc) or time.monotonic() + pause > deadline:
                    raise
                log.warning("Redis at %s is not reachable (%s): asking again in %g s, for up to %.0f s more",
                            safe_url(settings.redis_url), exc, pause, deadline - time.monotonic())
                await asyncio.sleep(pause)
                pause = min(pause * 2, 8.0)
        if not reading:
            await store.migrate()
        await _warn_if_evicting(store)
        return store
    except StoreError as exc:
        await store.close()
        answered = refusal(exc)  # Redis answered, and refused: REDIS_URL is wrong, waiting will not help
        if not fallback:
            if answered:
                raise ConfigError(f"Redis at {safe_url(settings.redis_url)} refused: {answered} (check REDIS_URL: "
                                  "its user and password, its database number)") from exc
            raise
        log.warning("Redis at %s %s: using the in-process store (NOT durable)", safe_url(settings.redis_url),
                    f"refused ({answered})" if answered else "is not reachable")
        return MemoryStore()


@dataclass
class Assembly:
    """An engine and what hosts it: whoever runs one also runs its sweeps (``sweeps.start()``)."""

    engine: Engine
    bus: EventBus
    store: Store
    meta: MetaStore
    reports: Reports
    outbox: Outbox
    queue: WorkQueue
    model: ChatModel
    toolbox: ops.Toolbox
    sweeps: Sweeps
    mcp: McpHub | None = None
    """The MCP servers this engine's tools come from (connections to close at the end)."""
    telemetry: Telemetry | None = None
    followups: Followups | None = None
    """Follow-ups in Slack threads (its store is the assembly's; the Slack service announces and fires them)."""

    async def close_tools(self) -> None:
        """Close what the engine holds besides the store and the model: MCP sessions; flush the traces not yet
        exported."""
        if self.mcp is not None:
            await self.mcp.stop()
        if self.telemetry is not None:
            await asyncio.to_thread(self.telemetry.shutdown)

    async def close_connections(self) -> None:
        """Close the store, then the model's and the toolbox's connections. They go last: a run still at work when
        shutdown stops waiting fails on the closed store, unsaved, and another worker takes it up; on a closed
        model or Kubernetes client it would save a failure and tell its person so."""
        await self.store.close()
        await self.model.aclose()
        await self.toolbox.aclose()

    @classmethod
    def around(cls, engine: Engine, store: RedisStore | MemoryStore, model: ChatModel,
               toolbox: ops.Toolbox) -> Assembly:
        """An assembly for an engine built by hand (tests, benchmarks) over one of our stores."""
        return cls(engine, engine.deps.bus, store, store.meta, store, store.outbox, store.queue, model, toolbox,
                   Sweeps(engine), followups=Followups(store.timers))


async def assemble(settings: Settings, *, fallback_store: bool = True, with_mcp: bool = True,
                   with_model: bool = True, with_followups: bool = False) -> Assembly:
    """Everything an engine needs. ``with_mcp``, ``with_model``: connect the MCP servers, load the model's SDK
    (where runs happen; a Slack front that only hands work on needs neither). ``with_followups``: offer the model
    ``schedule_followup``."""
    model = build_model(settings, load=with_model)
    toolbox = build_toolbox(settings)
    hub = McpHub(settings.mcp_servers) if with_mcp and settings.mcp_servers else None
    try:
        extra = await hub.start() if hub is not None else []
        registry = build_registry(settings, toolbox, extra)
    except (McpStartupError, ConfigError) as exc:
        if hub is not None:
            await hub.stop()
        raise ConfigError(str(exc)) from exc
    store = await open_store(settings, fallback=fallback_store,
                             wait_s=0.0 if fallback_store else settings.redis_outage_grace_s)
    bus = EventBus()
    telemetry = tracing(settings, model)
    if telemetry is not None:
        bus.listen(telemetry.observe)
    deps = RunDeps(model=model, registry=registry, store=store, bus=bus, limits=settings.limits,
                   context_budget_tokens=settings.context_budget_tokens,
                   interrupt_ttl_s=float(settings.interrupt_ttl_s))
    engine = Engine(deps, EngineOptions(lease_ttl_ms=int(settings.sweeps.lease_ttl_s * 1000)))
    sweeps = Sweeps(engine, interval_s=settings.sweeps.interval_s, stale_after_s=settings.sweeps.stale_after_s)
    followups = Followups(store.timers)
    if with_followups:  # Slack's: a follow-up runs in a Slack thread (elsewhere the model would only be refused)
        registry.add(followup_tool(followups))
    return Assembly(engine, bus, store, store.meta, store, store.outbox, store.queue, model, toolbox, sweeps, hub,
                    telemetry, followups)


def tracing(settings: Settings, model: ChatModel) -> Telemetry | None:
    """Traces when an OTLP endpoint is configured; None (and nothing of OpenTelemetry imported) otherwise."""
    endpoint = settings.telemetry.otlp_endpoint
    if not (endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return None
    from bot.telemetry import Telemetry, otlp

    provider, _, name = model.label.partition(":")
    if model.scripted:
        provider, name = "scripted", "demo"
    return Telemetry(otlp(endpoint), provider_name=provider.removesuffix("-compatible"), model_name=name,
                     capture_content=settings.telemetry.capture_content,
                     service_name=settings.telemetry.service_name)
