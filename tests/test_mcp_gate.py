"""An MCP server's changes behind the same gate as ours, wherever its tools name the environment: a rule on
another argument (``confirm: {in: [prod], field: env}``) decides the card, the approvers and the two-person rule;
a change whose environment is left to the server's default is asked about; a tool its server calls both
read-only and destructive is a change; a rule naming an environment no service has is refused at start."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.config import Settings, environment_problems
from bot.demo.sender import block_action, mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from core.messages import ToolResultMessage
from tests.slack_harness import CHANNEL, card_of, open_workspace
from tools.mcp import McpHub, McpServerConfig, McpToolRule
from tools.registry import Registry, ToolSpec

ROOT = Path(__file__).resolve().parents[1]


def deploy_server(log: Path | None = None, **rules: Any) -> McpServerConfig:
    return McpServerConfig(name="dep", command=sys.executable, args=[str(ROOT / "tests/fakes/deploy_mcp.py")],
                           env={"DEPLOY_MCP_LOG": str(log or "/dev/null")},
                           tools={name: McpToolRule.model_validate(rule) for name, rule in rules.items()})


@pytest.fixture
def ran(tmp_path: Path) -> Path:
    log = tmp_path / "ran.jsonl"
    log.touch()
    return log


def calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.fixture
async def specs(ran: Path) -> AsyncIterator[list[ToolSpec]]:
    hub = McpHub([deploy_server(ran, deploy={"confirm": {"in": ["prod"], "field": "env"}},
                                rotate_keys={"confirm": {"in": ["prod"]}})])
    try:
        yield await hub.start()
    finally:
        await hub.stop()


async def test_the_server_s_worse_word_and_a_missing_environment_are_asked_about(specs: list[ToolSpec]) -> None:
    registry = Registry.of(specs)
    purge, rotate, deploy = registry.get("dep__purge_queue"), registry.get("dep__rotate_keys"), \
        registry.get("dep__deploy")
    assert purge is not None and purge.mutating and purge.provenance == "server_destructive"
    assert rotate is not None and rotate.needs_confirmation(rotate.args_model.model_validate({"service": "pay"}))
    assert not rotate.needs_confirmation(rotate.args_model.model_validate({"service": "pay",
                                                                          "environment": "staging"}))
    assert deploy is not None and deploy.environment_of({"service": "pay", "env": "prod"}) == "prod"


async def test_a_change_that_leaves_its_environment_to_its_server_is_refused(specs: list[ToolSpec], ran: Path,
                                                                            redis_url: str, prefix: str,
                                                                            slack: FakeSlack) -> None:
    """`dep__rotate_keys(service)` — its server's default, prod — got a card with no environment, which anyone
    could confirm: no approvers rule and no two-person rule matched an environment nobody named."""
    model = ScriptedModel([reply("", call("dep__rotate_keys", "c1", service="payments")), reply("Done.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=specs, two_person_rule=["prod"],
                              approvers={"dep__rotate_keys": {"prod": {"users": ["UBOSS"]}}})
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "rotate the payments keys", "410.1"))
        await ws.settle()
        assert not [m for m in slack.thread(CHANNEL, "410.1") if any(b["action_id"] == "opspilot_confirm"
                                                                     for b in buttons(m))]
        result = next(m for m in model.requests[-1].messages if isinstance(m, ToolResultMessage))
        assert result.error_code == "invalid_environment" and "environment is required" in result.content, result
        assert calls(ran) == []
    finally:
        await ws.stop()


async def test_a_rule_on_env_decides_who_may_confirm(specs: list[ToolSpec], ran: Path, redis_url: str, prefix: str,
                                                     slack: FakeSlack) -> None:
    """`dep__deploy(env=prod)` with approvers and the two-person rule for prod: its card said "anyone who may use
    OpsPilot", showed no environment, and a non-approver's Confirm, or the requester's own, deployed to prod."""
    model = ScriptedModel([reply("", call("dep__deploy", "c1", service="payments", env="prod", version="9.9.9")),
                           reply("Deployed.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=specs, two_person_rule=["prod"],
                              approvers={"dep__deploy": {"prod": {"users": ["UBOSS", "UREQ"]}}})
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "deploy 9.9.9 to payments in prod", "400.1"))
        await ws.settle()
        card = card_of(slack, "400.1")
        assert "`prod`" in all_text(card) and "Two-person rule in `prod`" in all_text(card), all_text(card)
        token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
        for user in ("URANDOM", "UREQ", "UBOSS"):
            await ws.sender.action(block_action(user=user, channel=CHANNEL, message=card,
                                                action_id="opspilot_confirm", value=token))
            await ws.settle()
            assert calls(ran) == ([] if user != "UBOSS" else [
                {"tool": "deploy", "service": "payments", "env": "prod", "version": "9.9.9"}]), user
    finally:
        await ws.stop()


def test_a_misspelt_environment_in_an_mcp_rule_is_refused_at_start() -> None:
    settings = Settings(mcp_servers=[deploy_server(set_flag={"confirm": {"in": ["production"]}},
                                                   deploy={"confirm": {"in": ["eu-west"], "field": "region"}})],
                        slack={"approvers": {"dep__deplyo": {"prod": {"users": ["UBOSS"]}},
                                             "dep__deploy": {"eu-west": {"users": ["UBOSS"]}}}})
    problems = environment_problems(settings, ["prod", "staging"], ["dep__deploy", "dep__rotate_keys"])
    assert any("mcp_servers.dep.tools.set_flag.confirm.in" in p and "'production'" in p for p in problems), problems
    assert not any("region" in p or "eu-west" in p for p in problems)  # another argument's names are its own
    assert any("slack.approvers.dep__deplyo" in p and "dep__deploy" in p for p in problems), problems
    # A server that did not connect (none of its tools listed) is not judged on its tools' names yet.
    unlisted = environment_problems(settings, ["prod", "staging"], ["restart_service"])
    assert not any("dep__deplyo" in p for p in unlisted) and any("set_flag" in p for p in unlisted)


async def test_a_confirm_in_override_keeps_an_mcp_tool_s_environment_required(ran: Path) -> None:
    """`tools.dep__rotate_keys.confirm_in: [prod]` — the override configuration.md describes — replaced the rule with
    one that neither required the environment nor kept its argument: the call without one ran unconfirmed."""
    from bot.assembly import validate
    from core.messages import ToolCall
    from state import MemoryStore
    from tools import ops
    from tools.registry import ToolContext
    from tools.runtime import execute_one

    hub = McpHub([deploy_server(ran)])  # no rule on the server: the override is the only one
    try:
        specs = await hub.start()
        settings = Settings(mcp_servers=[deploy_server(ran)], tools={"dep__rotate_keys": {"confirm_in": ["prod"]}})
        registry, _ = validate(settings, ops.build(), specs)
        ctx = ToolContext(run_id="r", thread_id="t", user_id="UREQ", call_id="c1")
        done = await execute_one(ToolCall(id="c1", name="dep__rotate_keys", arguments={"service": "payments"}),
                                 registry=registry, ctx=ctx, journal=MemoryStore().journal)
        assert done.interrupt is None and done.result is not None and done.result.error_code == "invalid_environment"
        assert calls(ran) == []
    finally:
        await hub.stop()


async def test_a_confirm_in_override_on_a_tool_with_no_environment_argument_is_refused_at_start(ran: Path) -> None:
    """`tools.dep__deploy.confirm_in: [prod]` on a tool whose argument is `env`: every call was refused for a missing
    `environment`, and a model adding `environment: staging` beside `env: prod` deployed to prod unconfirmed (a
    plugin's such tool never asked at all)."""
    from bot.assembly import validate
    from bot.config import ConfigError
    from tools import ops

    hub = McpHub([deploy_server(ran)])
    try:
        specs = await hub.start()
        settings = Settings(mcp_servers=[deploy_server(ran)], tools={"dep__deploy": {"confirm_in": ["prod"]}})
        with pytest.raises(ConfigError, match=r"has no 'environment' argument .*env"):
            validate(settings, ops.build(), specs)
    finally:
        await hub.stop()


@pytest.mark.parametrize("args", [{"service": "payments", "env": "prod", "version": "9.9.9"}, {"service": "payments"}])
async def test_a_tool_on_the_default_rule_with_approvers_per_environment_fails_closed(
        ran: Path, redis_url: str, prefix: str, slack: FakeSlack, args: dict[str, Any]) -> None:
    """The default rule (`confirm: always`) reads no environment argument, so approvers for prod and the
    two-person rule never matched: the requester confirmed their own prod deploy (or a key rotation the server ran
    in prod by default). Who may confirm depends on an environment the call does not name to OpsPilot: nobody."""
    hub = McpHub([deploy_server(ran)])  # no rule of its own for any tool: `always`
    specs = await hub.start()
    tool = "dep__deploy" if "env" in args else "dep__rotate_keys"
    model = ScriptedModel([reply("", call(tool, "c1", **args)), reply("Done.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=specs, two_person_rule=["prod"],
                              approvers={tool: {"prod": {"users": ["UBOSS"]}}})
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", f"please run {tool}", "410.1"))
        await ws.settle()
        card = card_of(slack, "410.1")
        for user in ("UREQ", "UBOSS"):
            for b in [b for b in buttons(card) if b["action_id"] == "opspilot_confirm"]:
                await ws.sender.action(block_action(user=user, channel=CHANNEL, message=card,
                                                    action_id="opspilot_confirm", value=b["value"]))
                await ws.settle()
        assert calls(ran) == []  # nobody could confirm it
        assert "Who may confirm: nobody (this `dep__" in all_text(card), all_text(card)
    finally:
        await ws.stop()
        await hub.stop()
