"""A value someone else wrote — the model's arguments, an MCP tool's target or environment, a typed form value —
shown inside one of OpsPilot's code spans cannot close it: a backtick in it would let the rest pass as OpsPilot's
own words (a bold "OpsPilot: verified", a bare link) in an audit line, a card, App Home."""

from __future__ import annotations

import re

from bot.agent.events import CallDecided
from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from bot.slack.outbound.audit import audit_line
from bot.slack.outbound.change_card import confirm_card
from bot.slack.outbound.progress_words import card_ending
from tests.slack_harness import CHANNEL, open_workspace

FORGED = "ORION-7731` *OpsPilot: verified, error rate 9.00% → 0.10%* see https://evil-status.example/sso `x"


def outside_code(text: str) -> str:
    return re.sub(r"`[^`\n]*`", "", text)


def live(text: str) -> bool:
    rest = outside_code(text)
    return "*OpsPilot: verified" in rest or "https://evil-status" in rest


async def test_a_change_s_argument_stays_inside_its_span_in_the_answer_and_on_app_home(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    model = ScriptedModel([reply("", call("restart_service", "c1", service_id="payments", environment="staging",
                                          reason=FORGED)), reply("Restarted.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model)
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "restart payments in staging", "400.1"))
        await ws.settle()
        [answer] = [all_text(m) for m in slack.thread(CHANNEL, "400.1") if "reason=" in all_text(m)]
        await ws.service.inbound.home.publish("UREQ")
        home = all_text(slack.homes["UREQ"])
        assert "reason=" in home
        assert not live(answer[answer.index("reason="):]) and not live(home[home.index("reason="):]), (answer, home)
    finally:
        await ws.stop()


def test_an_mcp_tool_s_target_and_environment_stay_inside_their_spans() -> None:
    entry = {"tool": "mcp_restart", "arguments": f'{{"service": "{FORGED}", "environment": "{FORGED}"}}'.replace(
        "→", "->"), "requested_by": "UREQ", "status": "ok"}
    assert not live(audit_line(entry, "en")) and not live(audit_line(entry, "zh"))
    payload = {"tool": "mcp_restart", "target": FORGED, "environment": FORGED, "arguments": {"service": FORGED}}
    card = " ".join(str(b) for b in confirm_card("tok", "why", payload, "en"))
    assert not live(card), card


def test_a_typed_form_value_stays_inside_its_span_on_the_closed_card() -> None:
    event = CallDecided(run_id="r", thread_id="t", seq=1, call_id="c", tool="t", token="k", decision="submitted",
                        by="UREQ", at=0.0,
                        values={"environment": FORGED}, asked_at=0.0)
    assert not live(card_ending(event, "en")) and not live(card_ending(event, "zh"))


def test_no_code_span_is_built_around_an_escaped_value_by_hand() -> None:
    """``kit.code`` / ``kit.bare`` turn a backtick into a quote; ``escape`` alone does not."""
    from pathlib import Path

    hand_built = re.compile(r"`\{(?:kit\.)?escape\(")
    found = [f"{p}:{n}" for p in Path("bot").rglob("*.py")
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if hand_built.search(line)]
    assert not found, found


async def test_a_refusal_quotes_the_environment_it_was_asked_for_inside_its_span() -> None:
    from slack_sdk.web.async_client import AsyncWebClient

    from bot.config import SlackConfig
    from bot.slack.inbound.access import AccessPolicy

    access = AccessPolicy(SlackConfig(bot_token="xoxb-x", signing_secret="s"), AsyncWebClient(token="x"),
                          environments=["prod", "staging"])
    verdict = await access.may_confirm("UREQ", "restart_service", FORGED, "UREQ")
    assert not verdict.allowed and not live(verdict.words("en")), verdict.words("en")


async def test_a_typed_schedule_id_is_echoed_inside_its_span(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    ws = await open_workspace(redis_url, prefix, slack)
    try:
        await ws.sender.command({"command": "/opspilot", "text": f"schedules cancel {FORGED.replace(' ', '_')}",
                                 "user_id": "UREQ", "channel_id": CHANNEL, "team_id": "T0001", "trigger_id": "sp-1",
                                 "response_url": slack.response_url(CHANNEL)})
        await ws.settle()
        [told] = slack.ephemeral_texts("UREQ")
        assert "no scheduled check" in told and not live(told.replace("_", " ")), told
    finally:
        await ws.stop()
