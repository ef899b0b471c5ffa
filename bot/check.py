"""``opspilot check``: is this installation ready? One line per check, with the fix when it fails.

Required checks that fail make the command exit 1: a config rule that can never match, Redis unreachable or
older than 6.2 or evicting keys, no persistence, a Slack token Slack refuses or scopes the manifest needs,
the mode's secret missing, a model key that does not answer, an MCP server that does not start, a toolbox
backend that does not answer. Optional things that are absent (no Slack, no model key) are said, not failed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bot.config import Settings, environment_problems
from bot.slack.failures import slack_error
from state import StoreError, connect
from tools import ops
from tools.errors import ToolError

MANIFEST = Path(__file__).resolve().parents[1] / "manifest.yml"
MIN_REDIS = (6, 2)  # XAUTOCLAIM


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    says: str
    fix: str = ""
    required: bool = True

    def line(self) -> str:
        mark = "✓" if self.ok else ("✗" if self.required else "!")
        return f"{mark} {self.name}: {self.says}" + (f" — fix: {self.fix}" if self.fix and not self.ok else "")


def _info(raw: Any) -> dict[str, Any]:
    """INFO from one server, or the first node's of a cluster (redis-py answers per node there)."""
    if isinstance(raw, dict) and "redis_version" not in raw and raw:
        first = next(iter(raw.values()))
        return first if isinstance(first, dict) else {}
    return raw if isinstance(raw, dict) else {}


async def redis_checks(url: str) -> list[Check]:
    client = connect(url, timeout_s=3.0)
    try:
        info = _info(await client.info())
        try:  # managed Redis may forbid CONFIG: then the save rules are unknown, not absent
            save: str | None = str((await client.config_get("save")).get("save", ""))
        except Exception:
            save = None
    except Exception as exc:  # anything: the check says what, the operator fixes it
        return [Check("Redis", False, f"not reachable at {_safe(url)} ({type(exc).__name__})",
                      "start Redis or set REDIS_URL")]
    finally:
        await client.aclose()
    version = str(info.get("redis_version", "0"))
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    checks = [Check("Redis", parts >= MIN_REDIS, f"{version} at {_safe(url)}",
                    f"Redis {'.'.join(map(str, MIN_REDIS))} or newer is needed (XAUTOCLAIM)")]
    policy = str(info.get("maxmemory_policy", "unknown"))
    checks.append(Check("Redis eviction", policy == "noeviction", f"maxmemory-policy is {policy}"
                        + ("" if policy == "noeviction" else ": paused runs and transcripts can be evicted"),
                        "CONFIG SET maxmemory-policy noeviction (and in redis.conf)"))
    aof = str(info.get("aof_enabled", "0")) == "1"
    if aof or save:
        checks.append(Check("Redis persistence", True, "AOF on" if aof else f"RDB snapshots (save {save})"))
    elif save is None:
        checks.append(Check("Redis persistence", False, "AOF off and the save rules cannot be read (CONFIG is "
                            "disabled)", "make sure the provider keeps snapshots or AOF", required=False))
    else:
        checks.append(Check("Redis persistence", False, "off: a Redis restart loses every paused run",
                            "appendonly yes (or save rules) in redis.conf"))
    return checks


def _safe(url: str) -> str:
    """The URL without its password."""
    _, sep, tail = url.rpartition("@")
    return f"{url.split('://', 1)[0]}://…@{tail}" if sep else url


def manifest_scopes(path: Path = MANIFEST) -> set[str]:
    body = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return set(((body.get("oauth_config") or {}).get("scopes") or {}).get("bot") or [])


async def slack_checks(settings: Settings) -> list[Check]:
    slack = settings.slack
    if not slack.bot_token:
        return [Check("Slack", False, "no SLACK_BOT_TOKEN: only `opspilot chat` and `opspilot demo` can run",
                      "set SLACK_BOT_TOKEN (xoxb-…) to serve Slack", required=False)]
    from slack_sdk.errors import SlackApiError
    from slack_sdk.web.async_client import AsyncWebClient

    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url, timeout=10)
    try:
        answer = await client.auth_test()
    except SlackApiError as exc:
        return [Check("Slack token", False, f"refused by Slack ({slack_error(exc)})",
                      "copy the Bot User OAuth Token from the app's OAuth & Permissions page")]
    except Exception as exc:  # unreachable, a timeout: said, not raised
        return [Check("Slack token", False, f"Slack did not answer ({type(exc).__name__})",
                      "check the network path to Slack (or SLACK_API_URL)")]
    checks = [Check("Slack token", True, f"valid for workspace {answer.get('team')} ({answer.get('team_id')})")]
    granted = {s.strip() for s in str(answer.headers.get("x-oauth-scopes", "")).split(",") if s.strip()}
    wanted = manifest_scopes()
    if not granted:
        checks.append(Check("Slack scopes", False, "Slack did not report the token's scopes", required=False))
    else:
        missing = sorted(wanted - granted)
        checks.append(Check("Slack scopes", not missing,
                            f"missing {', '.join(missing)}" if missing else "every scope manifest.yml asks for",
                            "add them under OAuth & Permissions (or reinstall from manifest.yml)"))
        extra = sorted(granted - wanted)  # an install from an older manifest keeps scopes nothing uses now
        if extra:
            checks.append(Check("Slack scopes beyond the manifest", False, f"granted but unused: {', '.join(extra)}",
                                "remove them under OAuth & Permissions and reinstall (least privilege)",
                                required=False))
    if slack.app_token:
        checks.append(Check("Slack mode", slack.app_token.startswith("xapp-"), "Socket Mode (SLACK_APP_TOKEN)",
                            "SLACK_APP_TOKEN is an app-level token starting with xapp-"))
    else:
        checks.append(Check("Slack mode", bool(slack.signing_secret), "HTTP mode" + (
            "" if slack.signing_secret else ": no SLACK_SIGNING_SECRET, so no request can be verified"),
            "set SLACK_SIGNING_SECRET (Basic Information → Signing Secret), or SLACK_APP_TOKEN for Socket Mode"))
    return checks


async def model_check() -> Check:
    if os.environ.get("ANTHROPIC_API_KEY"):
        provider = "anthropic"
    elif os.environ.get("OPENAI_API_KEY"):
        provider = "openai"
    else:
        return Check("Model", False, "**no key: the scripted demo model will answer** (rule-based, demo data only)",
                     "set ANTHROPIC_API_KEY or OPENAI_API_KEY", required=False)
    try:
        if provider == "anthropic":
            import anthropic

            await anthropic.AsyncAnthropic().messages.create(
                model=os.environ.get("OPSPILOT_MODEL", "claude-sonnet-4-5"), max_tokens=1,
                messages=[{"role": "user", "content": "ping"}])
        else:
            import openai

            await openai.AsyncOpenAI().chat.completions.create(
                model=os.environ.get("OPSPILOT_MODEL", "gpt-4o-mini"), max_tokens=1,
                messages=[{"role": "user", "content": "ping"}])
    except Exception as exc:  # the SDKs' errors: said, with the class name the operator can look up
        return Check("Model", False, f"{provider} did not answer a one-token request ({type(exc).__name__})",
                     "check the key, OPSPILOT_MODEL and the network path to the provider")
    return Check("Model", True, f"{provider} answers")


async def toolbox_checks(settings: Settings) -> tuple[list[Check], ops.Toolbox | None]:
    try:
        toolbox = ops.build(settings.toolbox)
    except (ops.CatalogError, ValueError, ToolError) as exc:
        return [Check("Toolbox", False, str(exc), "fix the toolbox section of the config")], None
    checks = [Check("Catalog", True, f"{len(toolbox.catalog.ids)} services, environments "
                                     f"{', '.join(toolbox.catalog.environments)}")]
    checks += [Check("Config rule", False, problem, "name an environment the catalog has")
               for problem in environment_problems(settings, toolbox.catalog.environments)]
    service = toolbox.catalog.services[0] if toolbox.catalog.services else None
    if service is not None:
        env = service.environments[0]
        for source in toolbox.changes:
            if not source.serves(env):
                continue
            try:
                await source.changes(service, env, 0.0, toolbox.clock.now())
                checks.append(Check(f"Change history ({source.name})", True, "answers"))
            except ToolError as exc:
                checks.append(Check(f"Change history ({source.name})", False, exc.message,
                                    "fix toolbox.changes", required=exc.code != "not_configured"))
        try:
            await toolbox.metrics.series(service, env, toolbox.metrics.names[0], 5)
            checks.append(Check("Metrics", True, "answers"))
        except ToolError as exc:
            checks.append(Check("Metrics", False, exc.message, "fix toolbox.metrics"))
    checks += await kubernetes_checks(toolbox)
    return checks, toolbox


_NEEDS: dict[str, list[tuple[str, str, str | None]]] = {  # verb, resource, subresource — as rbac.yaml grants
    "restart_service": [("get", "deployments", None), ("patch", "deployments", None)],
    "rollback_service": [("get", "deployments", None), ("patch", "deployments", None),
                         ("list", "replicasets", None)],
    "scale_service": [("get", "deployments", None), ("patch", "deployments", "scale")],
    "recent_changes": [("get", "deployments", None), ("list", "replicasets", None)],
}


async def kubernetes_checks(toolbox: ops.Toolbox) -> list[Check]:
    """Whether the configured Kubernetes credentials may do what each tool needs, on each service in the
    catalog (SelfSubjectAccessReview, as ``kubectl auth can-i``): a missing grant is found now, not mid-incident."""
    from tools.ops.kube import KubeClient

    users: list[tuple[str, KubeClient]] = []
    for name, backend in (("restart_service", toolbox.restarts), ("rollback_service", toolbox.rollbacks),
                          ("scale_service", toolbox.scaling), *(("recent_changes", c) for c in toolbox.changes)):
        kube = getattr(backend, "kube", None)
        if isinstance(kube, KubeClient):
            users.append((name, kube))
    checks: list[Check] = []
    for name, kube in users:
        missing: list[str] = []
        try:
            for service in toolbox.catalog.services:
                if service.kubernetes is None:
                    continue
                ns, deployment = service.kubernetes.namespace, service.kubernetes.deployment
                for verb, resource, sub in _NEEDS[name]:
                    target = deployment if resource == "deployments" else None
                    ok, _ = await kube.allowed(ns, verb, resource, target, sub)
                    if not ok:
                        what = resource + (f"/{sub}" if sub else "")
                        missing.append(f"{verb} {what}" + (f" {ns}/{target}" if target else f" in {ns}"))
        except ToolError as exc:
            checks.append(Check(f"Kubernetes permissions ({name})", False, exc.message, "see toolbox in the config"))
            continue
        checks.append(Check(f"Kubernetes permissions ({name})", not missing,
                            "granted" if not missing else "missing: " + "; ".join(missing[:6]),
                            "grant them as deploy/kubernetes/rbac.yaml does"))
    return checks


async def mcp_checks(settings: Settings) -> list[Check]:
    if not settings.mcp_servers:
        return []
    from tools.mcp import McpHub

    hub = McpHub(settings.mcp_servers)
    try:
        await hub.start()
        return [Check(f"MCP server {name}", h["state"] == "up", str(h["state"]) + (
            f" ({h.get('error')})" if h.get("error") else ""), "see its command, args and env in mcp_servers")
                for name, h in hub.health().items()]
    except Exception as exc:  # a server that cannot start at all
        return [Check("MCP servers", False, f"{type(exc).__name__}: {exc}", "see mcp_servers")]
    finally:
        await hub.stop()


async def run(settings: Settings) -> list[Check]:
    checks: list[Check] = []
    try:
        checks += await redis_checks(settings.redis_url)
    except StoreError as exc:
        checks.append(Check("Redis", False, str(exc), "start Redis or set REDIS_URL"))
    checks += await slack_checks(settings)
    checks.append(await model_check())
    more, _ = await toolbox_checks(settings)
    checks += more
    checks += await mcp_checks(settings)
    return checks
