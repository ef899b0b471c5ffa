"""``opspilot check``: would ``serve`` start, and would it work? One line per check, with the fix when it fails
(or, with ``--json``, the same as data for automation).

It validates the configuration through the same functions serve does (:mod:`bot.assembly`): what serve refuses
is ✗ and exits 2 as serve would, what serve warns about is !. Then every dependency is probed read-only, side by
side, each with its own deadline (:mod:`bot.probes`): Redis, Slack (the bot token and the Socket Mode app token),
the configured model, MCP servers and every toolbox backend. A required check that fails exits 1.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bot import exits
from bot.config import Settings
from bot.cpus import last_port
from bot.probes import STAGED_S, Check, bounded
from bot.probes.kube_probe import kubernetes_checks
from bot.probes.redis_probe import MIN_REDIS, redis_checks
from bot.probes.slack import MANIFEST, manifest_scopes

__all__ = ["MANIFEST", "MIN_REDIS", "Check", "exit_code", "kubernetes_checks", "manifest_scopes", "redis_checks",
           "report", "run"]


async def run(settings: Settings) -> list[Check]:
    from bot.probes.backends import toolbox_checks
    from bot.probes.model import model_check
    from bot.probes.slack import slack_checks

    async def model() -> list[Check]:
        return [await model_check(settings)]

    async def toolbox() -> list[Check]:
        found: list[Check] = []  # kept past the deadline: one slow server or backend hides no other line
        said = await bounded("Toolbox", lambda: toolbox_checks(settings, found), deadline_s=STAGED_S,
                             fix="check the toolbox section and mcp_servers")
        return said if said is found else [*found, *said]

    probes = [
        bounded("Redis", lambda: redis_checks(settings.redis_url, prefix=settings.key_prefix),
                fix="start Redis or set REDIS_URL"),
        bounded("Slack", lambda: slack_checks(settings), fix="check the network path to Slack (or SLACK_API_URL)"),
        # The model's own deadline is inside (the request's); this one also covers importing its SDK.
        bounded("Model", model, deadline_s=STAGED_S, fix="check the network path to the model provider"),
        # MCP servers start and then every backend is probed: two deadlines back to back, within TOTAL_S.
        toolbox(),
    ]
    return [*_ports(settings), *(c for found in await asyncio.gather(*probes) for c in found)]


def _ports(settings: Settings) -> list[Check]:
    """The ports serve binds (the front's and one per worker by default), as serve refuses them: only when out of
    range (whether one is free now says nothing of when serve starts)."""
    port = settings.slack.port
    if (last := last_port(port)) <= 65535:
        return []
    return [Check("Ports", False, f"serve would bind ports {port}–{last} (its front and {last - port} workers): "
                  f"{last} is out of range", "set PORT (or --port) lower, or serve --workers fewer", refused=True)]


def exit_code(checks: list[Check]) -> int:
    """2 where serve would refuse to start (as serve exits), 1 where a required check failed, else 0."""
    if any(c.refused for c in checks):
        return exits.CONFIG
    return exits.FAILED if any(c.status == "fail" for c in checks) else exits.OK


def report(checks: list[Check], *, as_json: bool) -> str:
    code = exit_code(checks)
    if as_json:
        body: dict[str, Any] = {"ready": code == exits.OK, "exit_code": code, "checks": [c.as_json() for c in checks]}
        return json.dumps(body, ensure_ascii=False, indent=1)
    failed = sum(c.status == "fail" for c in checks)
    verdict = "ready" if code == exits.OK else (
        "not ready: serve would refuse this configuration" if code == exits.CONFIG
        else f"not ready: {failed} required check(s) failed")
    return "\n".join([*(c.line() for c in checks), verdict])
