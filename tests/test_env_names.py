"""One spelling of an environment name for every rule (core/envs.py): ``"prod "`` or a look-alike ``prod`` is
refused before any card, for our tools and MCP tools alike, and the confirm rules judge a stored one as prod;
a change naming a service the catalog lacks is refused before a card asks anyone to confirm it."""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel, ConfigDict
from slack_sdk.web.async_client import AsyncWebClient

from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.config import SlackConfig
from bot.demo.sender import block_action, mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import buttons
from bot.slack.inbound.access import AccessPolicy
from core.envs import environment_name
from core.messages import ToolCall
from state import MemoryStore
from tests.slack_harness import CHANNEL, open_workspace
from tests.toolkit import Probe, toolkit
from tools import ops, tool
from tools.registry import Registry, ToolContext, ToolSpec, always
from tools.runtime import Observation, execute_one


def test_one_spelling() -> None:
    assert environment_name(" Prod ") == "prod"
    assert environment_name("PROD") == "prod"
    assert environment_name("pr\u043ed") is None  # a Cyrillic о
    assert environment_name("prod\u200b") is None  # a zero-width space
    assert environment_name("prod\x1b") is None


async def _run(specs: list[ToolSpec], name: str, **args: Any) -> Observation:
    ctx = ToolContext(run_id="r", thread_id="t", user_id="UREQ", call_id=f"c-{time.time_ns()}")
    return await execute_one(ToolCall(id=ctx.call_id, name=name, arguments=args), registry=Registry.of(specs),
                             ctx=ctx, journal=MemoryStore().journal)


def _code(obs: Observation) -> str:
    assert obs.interrupt is None and obs.result is not None, obs.interrupt  # no card asked
    return str(json.loads(obs.result.content)["errorCode"])


class _Deploy(BaseModel):
    model_config = ConfigDict(extra="allow")
    environment: str = ""


async def test_prod_with_a_space_or_a_look_alike_is_refused_before_any_card() -> None:
    probe = Probe()

    @tool(name="mcp__deploy", description="Deploys (an MCP server's tool).", mutating=True, confirm=always)
    async def deploy(args: _Deploy, ctx: ToolContext) -> dict[str, Any]:
        probe.mark("deploy")
        return {}

    specs = [toolkit(probe)["change"], deploy]
    for env in ("prod ", " prod", "pr\u043ed", "prod\u200b"):
        assert _code(await _run(specs, "change", target="db", environment=env)) == "invalid_environment", env
        assert _code(await _run(specs, "mcp__deploy", environment=env)) == "invalid_environment", env
    assert (await _run(specs, "mcp__deploy", environment="prod")).interrupt is not None  # the card, as before
    assert probe.count("change") == probe.count("deploy") == 0


async def test_a_restart_of_a_service_the_catalog_lacks_gets_no_card() -> None:
    specs = ops.build().specs
    obs = await _run(specs, "restart_service", service_id="no-such-svc", environment="prod")
    assert _code(obs) == "not_found"
    assert "no-such-svc" in str(obs.result.content if obs.result else "")
    svc = ops.build().catalog.ids[0]
    assert _code(await _run(specs, "restart_service", service_id=svc, environment="moon")) == "validation_error"
    assert (await _run(specs, "restart_service", service_id=svc, environment="prod")).interrupt is not None


def _policy(**config: Any) -> AccessPolicy:
    return AccessPolicy(SlackConfig(bot_token="xoxb-x", signing_secret="s", **config), AsyncWebClient(token="x"),
                        environments=["prod", "staging"])


async def test_the_rules_judge_prod_with_a_space_as_prod() -> None:
    """What a stored card (or any other path) still holds is judged by the same spelling."""
    two = _policy(two_person_rule=["prod"])
    assert not (await two.may_confirm("UREQ", "change", "prod ", "UREQ")).allowed
    assert not (await two.may_confirm("UREQ", "change", "Prod", "UREQ")).allowed
    assert not (await two.may_confirm("UREQ", "change", "pr\u043ed", "UREQ")).allowed
    assert (await two.may_confirm("UOTHER", "change", "prod ", "UREQ")).allowed
    rules = _policy(approvers={"mcp__deploy": {"prod": {"users": ["UBOSS"]}, "*": {"users": ["UANY"]}}})
    for env in ("prod ", " PROD", "pr\u043ed"):
        assert not (await rules.may_confirm("UANY", "mcp__deploy", env, "UREQ")).allowed, env
    assert (await rules.may_confirm("UBOSS", "mcp__deploy", "prod ", "UREQ")).allowed
    assert (await rules.may_confirm("UANY", "mcp__deploy", "staging", "UREQ")).allowed


async def test_the_requester_cannot_confirm_their_own_prod_change_with_a_space(redis_url: str, prefix: str,
                                                                               slack: FakeSlack) -> None:
    """Through Slack: no card for "prod " (and were there one, the requester's click would be refused)."""
    probe = Probe()
    model = ScriptedModel([reply("", call("change", "c1", target="payments", environment="prod ")),
                           reply("Asked with the wrong spelling.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[toolkit(probe)["change"]],
                              two_person_rule=["prod"])
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "change payments in prod", "500.1"))
        await ws.settle()
        for card in [m for m in slack.thread(CHANNEL, "500.1")
                     if any(b["action_id"] == "opspilot_confirm" for b in buttons(m))]:
            token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
            await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=card,
                                                action_id="opspilot_confirm", value=token))
            await ws.settle()
        assert probe.count("change") == 0
        assert not any(any(b["action_id"] == "opspilot_confirm" for b in buttons(m))
                       for m in slack.thread(CHANNEL, "500.1"))
    finally:
        await ws.stop()
