"""Configuration: a YAML file (``OPSPILOT_CONFIG``, else ``./opspilot.yml`` when present) plus
environment overrides (``OPSPILOT_<SECTION>__<KEY>``, ``REDIS_URL``, ``OPSPILOT_MODEL``).

A bad config is a :class:`ConfigError` naming the offending key with a hint, never a traceback.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from bot import when
from bot.agent.limits import Limits
from bot.config_errors import ConfigError as ConfigError  # where it is raised from, for importers
from bot.config_errors import describe, describe_unparsed, suggest, unknown_variables
from bot.config_file import config_path as config_path
from bot.config_file import read_yaml
from bot.config_values import http_url, redis_url
from bot.run_limits import RunLimits
from core.envs import environment_name
from tools.mcp.servers import McpServerConfig
from tools.ops.toolbox_config import OpsConfig


def environments(names: list[str]) -> list[str]:
    """Environment names as every comparison sees them: ``Prod``, ``PROD`` and `` prod`` are ``prod``."""
    return list(dict.fromkeys(n.strip().lower() for n in names if n.strip()))


def slack_ids(ids: list[str]) -> list[str]:
    """Slack ids (U…, S…, C…) are upper case; a hand-written ``u0boss`` is the same user."""
    return list(dict.fromkeys(i.strip().upper() for i in ids if i.strip()))


class LLMConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: Literal["auto", "anthropic", "openai", "scripted"] = Field(
        "auto", description="auto: ANTHROPIC_API_KEY → Anthropic, OPENAI_API_KEY → OpenAI, neither → the scripted "
                            "demo model (scripted is refused while a key is set)")
    name: str | None = Field(None, description="model name; OPSPILOT_MODEL overrides")
    max_tokens: int = Field(2048, ge=64, description="output tokens per model call")
    token_field: Literal["auto", "max_completion_tokens", "max_tokens"] = Field(
        "auto", description="OpenAI-compatible: the name of the output-token limit; auto: max_completion_tokens "
                            "for api.openai.com, max_tokens for any other endpoint")
    timeout_s: float = Field(60.0, gt=0, description="per model call")
    max_retries: int = Field(2, ge=0, le=10, description="the SDK retries 429, 529 and 5xx this many times")
    scripted_latency_s: float = Field(0.0, ge=0, le=60,
                                      description="the scripted demo model waits this long per step (demos, load)")


class ToolPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    confirm_in: list[str] | None = Field(None, description="environments where a person must confirm")

    @field_validator("confirm_in")
    @classmethod
    def _environments(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else environments(value)


class Approvers(BaseModel):
    model_config = ConfigDict(extra="forbid")

    users: list[str] = Field(default_factory=list, description="Slack user ids")
    usergroups: list[str] = Field(default_factory=list, description="Slack user group ids (S…)")

    @field_validator("users", "usergroups")
    @classmethod
    def _ids(cls, value: list[str]) -> list[str]:
        return slack_ids(value)


class AlertSource(BaseModel):
    """A channel where alerts land, and which of its bot messages are alerts."""

    model_config = ConfigDict(extra="forbid")

    channel: str = Field(description="the channel id (C…)")
    bot_ids: list[str] = Field(default_factory=list, description="B… ids of the posting bots or webhooks")
    app_ids: list[str] = Field(default_factory=list, description="A… ids of the posting apps")
    usernames: list[str] = Field(default_factory=list, description="e.g. Alertmanager (a webhook's username)")
    mode: Literal["investigate", "button"] = Field(
        "button", description="investigate: start a run at once; button: offer an Investigate button")
    dedupe_window_s: int = Field(3600, ge=0, description="the same alert group again within this: no new run")
    max_runs: int = Field(5, ge=0, description="at most this many automatic runs per channel in any rate window "
                          "(a sliding window)")
    rate_window_s: int = Field(600, ge=1, description="the window of max_runs, in seconds")
    follow_up: Literal["mention", "all"] = Field(
        "mention", description="after the first investigation, answer in the alert's thread only when mentioned "
                               "(mention), or every reply there (all)")

    def posted(self, message: dict[str, Any]) -> bool:
        """Whether ``message`` comes from one of this channel's alert sources."""
        return (message.get("bot_id") in self.bot_ids or message.get("app_id") in self.app_ids
                or (message.get("username") or (message.get("bot_profile") or {}).get("name")) in self.usernames)


class SlackConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bot_token: str | None = Field(None, description="SLACK_BOT_TOKEN")
    signing_secret: str | None = Field(None, description="SLACK_SIGNING_SECRET")
    app_token: str | None = Field(None, description="SLACK_APP_TOKEN: Socket Mode when set")
    api_url: str = Field("https://slack.com/api/", description="SLACK_API_URL")
    port: int = Field(3000, ge=1, le=65535, description="PORT, HTTP mode")
    allowed_channels: list[str] = Field(default_factory=list, description="empty: any channel")
    allowed_users: list[str] = Field(default_factory=list, description="empty (and no groups): anyone of this "
                                     "workspace (see allow_outsiders)")
    allowed_usergroups: list[str] = Field(default_factory=list, description="members of these groups (S…) may "
                                          "use OpsPilot too")
    allow_outsiders: bool = Field(False, description="with no allowed_users or groups: guests and other "
                                  "organisations' accounts (Slack Connect) may use OpsPilot and confirm changes too")
    approvers: dict[str, dict[str, Approvers]] = Field(
        default_factory=dict, description="tool -> environment ('*' for any) -> who may confirm")
    two_person_rule: list[str] = Field(default_factory=list,
                                       description="environments where the requester may not approve")
    mutating_channels: list[str] = Field(default_factory=list, description="empty: any allowed channel")
    progress_interval_s: float = Field(1.0, ge=0.0, description="at most one progress edit per this many seconds")
    posts_per_second: float = Field(0.95, ge=0.0, description="pace chat.postMessage per channel; 0: no pacing")
    updates_per_minute: float = Field(45.0, ge=0.0, description="pace chat.update (Tier 3); 0: no pacing")
    reminder_before_s: int = Field(300, ge=0, description="remind this long before a question expires; 0: off")
    request_timeout_s: float = Field(10.0, gt=0, description="a Web API call not answered by then is retried")
    outbox_max_backoff_s: float = Field(30.0, gt=0, description="longest wait between delivery attempts")
    language: Literal["auto", "en", "zh"] = Field("auto", description="auto: each thread in its question's")
    progress: Literal["stream", "update", "auto"] = Field(
        "auto", description="stream: Slack's streaming (task cards); update: an edited message; "
                            "auto: stream where the workspace can, else update")
    thread_context_messages: int = Field(20, ge=0, description="read at most this many earlier thread messages")
    thread_context_chars: int = Field(6000, ge=0, description="... and at most this many characters of them")
    alert_sources: list[AlertSource] = Field(default_factory=list, description="channels where alerts land")
    limits: RunLimits = Field(default_factory=RunLimits, description="how often runs may start (docs/security.md)")
    channel_timezones: dict[str, str] = Field(
        default_factory=dict, description="channel id (C…) → IANA time zone: an incident summary's second time "
                                          "column there (default: the time zone of whoever asked for it)")

    @field_validator("approvers")
    @classmethod
    def _approvers(cls, value: dict[str, dict[str, Approvers]]) -> dict[str, dict[str, Approvers]]:
        out: dict[str, dict[str, Approvers]] = {}
        for tool, by_env in value.items():
            merged: dict[str, Approvers] = {}
            for env, who in by_env.items():
                key = env.strip().lower()
                if key in merged:  # "Prod" and "prod" both written: one rule with both lists
                    who = Approvers(users=merged[key].users + who.users,
                                    usergroups=merged[key].usergroups + who.usergroups)
                merged[key] = who
            out[tool.strip()] = merged
        return out

    @field_validator("two_person_rule")
    @classmethod
    def _two_person(cls, value: list[str]) -> list[str]:
        return environments(value)

    @field_validator("channel_timezones")
    @classmethod
    def _zones(cls, value: dict[str, str]) -> dict[str, str]:
        wrong = [f"{channel}: {zone!r}" for channel, zone in value.items() if not when.known_zone(zone)]
        if wrong:
            raise ValueError(f"not a time zone this system knows (e.g. Asia/Shanghai, UTC): {', '.join(wrong)}")
        return {channel.strip().upper(): zone for channel, zone in value.items()}

    @field_validator("allowed_channels", "allowed_users", "allowed_usergroups", "mutating_channels")
    @classmethod
    def _slack_ids(cls, value: list[str]) -> list[str]:
        return slack_ids(value)

    def alert_source(self, channel: str, message: dict[str, Any]) -> AlertSource | None:
        return next((a for a in self.alert_sources if a.channel == channel and a.posted(message)), None)


class EvalConfig(BaseModel):
    """``opspilot eval``: prices in USD per million tokens (input, output, cache read, cache write), by a name
    the model's label contains; they extend and override the built-in table (bot.eval.suite.PRICES)."""

    model_config = ConfigDict(extra="forbid")

    prices: dict[str, tuple[float, float, float, float]] = Field(
        default_factory=dict, description="model name part → USD per million tokens: input, output, cache read, "
                                          "cache write")


class TelemetryConfig(BaseModel):
    """OpenTelemetry traces (off unless an endpoint is set here or in OTEL_EXPORTER_OTLP_ENDPOINT)."""

    model_config = ConfigDict(extra="forbid")

    otlp_endpoint: str | None = Field(None, description="OTLP/HTTP base URL; traces go to <it>/v1/traces")
    capture_content: bool = Field(False, description="put tool arguments and results (scrubbed) on spans")
    service_name: str = Field("opspilot", description="service.name on every span")


class ScheduleConfig(BaseModel):
    """A scheduled check: a question OpsPilot asks itself at the times a crontab expression names, in a channel."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("", max_length=80, description="shown in lists (default: the question)")
    cron: str = Field(description="crontab: minute hour day-of-month month day-of-week, e.g. \"0 9 * * 1-5\"")
    timezone: str = Field("UTC", description="the IANA time zone the cron is read in (daylight saving included)")
    channel: str = Field(description="the channel id (C…) it reports in")
    question: str = Field(min_length=1, max_length=1000, description="what OpsPilot checks each time")
    quiet_when_ok: bool = Field(False, description="post only when the check found something (a quiet run is "
                                "still counted in `opspilot stats`)")

    @model_validator(mode="after")
    def _when(self) -> ScheduleConfig:
        wrong = when.problem(self.cron, self.timezone)
        if wrong:
            raise ValueError(wrong)
        self.channel = self.channel.strip().upper()
        return self


class SweepConfig(BaseModel):
    """The engine's periodic duties, run by whatever process hosts it (serve, demo, chat)."""

    model_config = ConfigDict(extra="forbid")

    interval_s: float = Field(15.0, gt=0, description="expiry, recovery (and Slack reminder) sweeps")
    stale_after_s: float = Field(45.0, gt=0, description="a running run untouched this long is checked")
    lease_ttl_s: float = Field(30.0, ge=1, description="a dead worker's hold on a thread lapses after this long")


class Settings(BaseSettings):
    # empty is unset: docker-compose's ${OPSPILOT_DEMO_DATA:-} passes "" on, which no bool reads
    model_config = SettingsConfigDict(env_prefix="OPSPILOT_", env_nested_delimiter="__", extra="forbid",
                                      env_ignore_empty=True)

    llm: LLMConfig = Field(default_factory=LLMConfig)
    limits: Limits = Field(default_factory=Limits)
    redis_url: str = Field("redis://localhost:6379/0",
                           validation_alias=AliasChoices("REDIS_URL", "OPSPILOT_REDIS_URL", "redis_url"),
                           description="or REDIS_URL (which wins when both are set): redis:// or rediss:// (one "
                                       "Redis, ≥ 6.2, noeviction), or redis+cluster://host:port[,host:port…] for a "
                                       "Redis Cluster")
    key_prefix: str = Field("opspilot", pattern=r"^[A-Za-z0-9_.:-]{1,64}$",
                            description="every Redis key starts with it (several installations, one Redis)")
    thread_ttl_s: int = Field(7 * 24 * 3600, ge=60, description="TTL of transcripts, runs, traces, journals")
    interrupt_ttl_s: int = Field(30 * 60, ge=10, description="how long a question to a person stays answerable")
    context_budget_tokens: int = Field(60_000, ge=1000, description="the transcript sent to the model is fitted "
                                       "to this (old tool outputs condensed first, then old turns dropped)")
    redis_outage_grace_s: float = Field(30.0, ge=0, description="Redis calls are retried this long through an outage")
    plugins: list[str] = Field(default_factory=list, description="extra modules whose tools are registered")
    mcp_servers: list[McpServerConfig] = Field(default_factory=list, description="MCP servers whose tools join")
    tools: dict[str, ToolPolicy] = Field(default_factory=dict, description="per tool (by name): when a person "
                                         "confirms")
    toolbox: OpsConfig = Field(default_factory=OpsConfig)
    sweeps: SweepConfig = Field(default_factory=SweepConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    slack: SlackConfig = Field(default_factory=SlackConfig)
    schedules: list[ScheduleConfig] = Field(default_factory=list,
                                            description="scheduled checks (see docs/slack.md, Follow-ups)")
    demo_data: bool = Field(False, description="or `serve --demo-data`: serve and worker may answer from the bundled "
                            "demo data (fictional; a replayed clock) and run the demo restart, rollback and scale "
                            "backends (recorded, not done); without it they refuse to start on either")
    misfire_grace_s: int = Field(600, ge=0, description="a follow-up or check missed while OpsPilot was down runs "
                                 "late within this; later, it is skipped with a line saying so")

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str) -> str:
        return redis_url(value)  # here, not where Redis is first dialled: redis-py's refusal is a traceback


def environment_problems(settings: Settings, known: list[str], tools: list[str] | None = None,
                         services: list[str] | None = None) -> list[str]:
    """Rules that can never match, which serve refuses (a typo would leave the real one unprotected), each with its
    key and the nearest known name; an MCP server's ``<server>__`` tools are known only once it connects."""
    problems: list[str] = []
    mcp = tuple(f"{server.name}__" for server in settings.mcp_servers)
    folded = {environment_name(k) or k for k in known}  # the rules' names are folded at load: so are the catalog's

    def env_problem(key: str, env: str) -> str:
        return f"{key}: no service in the catalog has environment {env!r}{suggest(env, known) or ' (known: none)'}"

    # A server whose tools are listed (it connected) is known like our own tools; one that did not, not yet.
    listed = tuple(prefix for prefix in mcp if any(t.startswith(prefix) for t in tools or ()))
    # An MCP rule on another argument (a region, a cluster) makes its names where that tool runs: its approvers
    # and the two-person rule may name them.
    own = {f"{server.name}__{tool}": {environment_name(e) or e for e in rule.confirm.environments}
           for server in settings.mcp_servers for tool, rule in server.tools.items()
           if not isinstance(rule.confirm, str) and rule.confirm.field != "environment"}
    for tool, by_env in settings.slack.approvers.items():
        if tools is not None and tool not in tools and (not tool.startswith(mcp) or tool.startswith(listed)):
            problems.append(f"slack.approvers.{tool}: there is no tool named {tool!r}{suggest(tool, tools)}")
        problems += [env_problem(f"slack.approvers.{tool}.{env}", env)
                     for env in by_env if env != "*" and env not in folded | own.get(tool, set())]
    problems += [env_problem("slack.two_person_rule", env) for env in settings.slack.two_person_rule
                 if env not in folded.union(*own.values())]
    for name, policy in settings.tools.items():
        problems += [env_problem(f"tools.{name}.confirm_in", env) for env in policy.confirm_in or []
                     if env not in folded]
    for server in settings.mcp_servers:  # a rule on another argument (a cluster, a region) has its own names
        problems += [env_problem(f"mcp_servers.{server.name}.tools.{tool}.confirm.in", env)
                     for tool, rule in server.tools.items() if not isinstance(rule.confirm, str)
                     and rule.confirm.field == "environment" for env in rule.confirm.environments
                     if (environment_name(env) or env) not in folded]
    for service, bounds in settings.toolbox.scale_bounds.items():
        if services is not None and service != "*" and service not in services:
            problems.append(f"toolbox.scale_bounds.{service}: there is no service {service!r} in the catalog"
                            f"{suggest(service, services)}")
        problems += [env_problem(f"toolbox.scale_bounds.{service}.{env}", env) for env in bounds
                     if env != "*" and env not in folded]
    return problems


def load_settings(path: str | None = None) -> Settings:
    file = config_path(path)
    data = read_yaml(file)
    for key, value in data.items():  # merged with the environment's, a section that is no mapping would be lost
        field = Settings.model_fields.get(key)
        kind = field.annotation if field is not None else None
        if isinstance(kind, type) and issubclass(kind, BaseModel) and not isinstance(value, dict | None):
            raise ConfigError(f"invalid configuration ({file}): {key}: must be a mapping of settings (key: value), "
                              f"not {type(value).__name__}")
    scalars = [n for n, f in Settings.model_fields.items() if f.annotation in (str, int, float, bool, str | None)]
    sections = [n for n in Settings.model_fields if n not in scalars]  # a name suggested is one that has keys
    if problem := unknown_variables(os.environ, sections, scalars):
        raise ConfigError(f"invalid configuration (environment): {problem}")

    class _FromFile(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            # Environment beats the file; the file beats the defaults.
            return init_settings, env_settings, InitSettingsSource(settings_cls, init_kwargs=data)

    source = f"{file} and environment" if file else "environment"
    try:
        settings: Settings = _FromFile()
    except ValidationError as exc:
        raise ConfigError(describe(exc, source, Settings)) from exc
    except SettingsError as exc:  # a variable not even parsed (JSON expected): no traceback either
        raise ConfigError(describe_unparsed(exc, source, os.environ)) from exc
    if os.environ.get("OPSPILOT_MODEL"):
        settings.llm.name = os.environ["OPSPILOT_MODEL"]
    for sdk in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):  # the SDKs read "" as a base URL: empty is unset here
        if os.environ.get(sdk) == "":  # (docker-compose's ${OPENAI_BASE_URL:-} passes one on)
            del os.environ[sdk]
    # Slack's own variable names, as every Slack app uses them.
    for env, attr in (("SLACK_BOT_TOKEN", "bot_token"), ("SLACK_SIGNING_SECRET", "signing_secret"),
                      ("SLACK_APP_TOKEN", "app_token"), ("SLACK_API_URL", "api_url")):
        if os.environ.get(env):
            setattr(settings.slack, attr, os.environ[env])
    try:
        http_url(settings.slack.api_url)
    except ValueError as exc:
        raise ConfigError(f"slack.api_url (SLACK_API_URL) {exc}") from exc
    if os.environ.get("PORT"):
        settings.slack.port = port_number(os.environ["PORT"], "PORT")
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") and not settings.telemetry.otlp_endpoint:  # in effect: shown
        settings.telemetry.otlp_endpoint = os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
    from bot.needed_extras import missing  # a configured feature whose optional extra is not installed
    if lacking := missing(settings):
        raise ConfigError(str(lacking))
    return settings


def port_number(value: str | int, name: str) -> int:
    """A TCP port as given on the command line or in ``PORT``: out of range, it is one line, not an
    OverflowError from the socket."""
    try:
        port = int(value)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a number, got {value!r}") from exc
    if not 1 <= port <= 65535:
        raise ConfigError(f"{name} must be a port number from 1 to 65535, got {port}")
    return port
