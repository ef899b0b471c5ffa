"""Slack's payloads as Slack sends them (shapes from Slack's event docs and Bolt's fixtures), through the real
HTTP endpoint: rich-text-only messages, file shares, colleagues' mentions, commands where the bot cannot post,
and everything nobody here listens for."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from bot.agent.models.scripted import ScriptedModel, reply
from bot.demo.sender import message
from bot.demo.workspace import LocalSlack as FakeSlack
from core.messages import Message, UserMessage
from tests.slack_harness import CHANNEL, Workspace, open_workspace


def answer(_: Sequence[Message], __: Sequence[str]) -> Any:
    return reply("Looked at it.")


@pytest.fixture
async def ws(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[tuple[Workspace, ScriptedModel]]:
    slack.profiles = {"U0ALICE": "Alice", "UREQ": "Rita"}
    model = ScriptedModel(answer)
    workspace = await open_workspace(redis_url, prefix, slack, model=model, specs=[])
    yield workspace, model
    await workspace.stop()


def questions(model: ScriptedModel) -> list[str]:
    return [next(m.content for m in reversed(r.messages) if isinstance(m, UserMessage)) for r in model.requests]


def rich(*elements: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "rich_text", "block_id": "Zk1", "elements": [
        {"type": "rich_text_section", "elements": list(elements)}]}]


async def test_a_question_only_in_rich_text_blocks_is_read_with_colleagues_named(
        ws: tuple[Workspace, ScriptedModel]) -> None:
    workspace, model = ws
    event = {"type": "app_mention", "channel": CHANNEL, "user": "UREQ", "ts": "500.1", "text": "",
             "blocks": rich({"type": "user", "user_id": "UBOT"}, {"type": "text", "text": " ask "},
                            {"type": "user", "user_id": "U0ALICE"},
                            {"type": "text", "text": " about the payments errors "},
                            {"type": "emoji", "name": "fire"})}
    status, _ = await workspace.sender.event(event)
    await workspace.settle()
    assert status == 200
    assert questions(model) == ["ask @Alice about the payments errors :fire:"]  # not "hello", the bot not in it

    # In plain text too: only the bot's own mention goes; a colleague stays, by name.
    await workspace.sender.event({"type": "app_mention", "channel": CHANNEL, "user": "UREQ", "ts": "501.1",
                                  "text": "<@UBOT> did <@U0ALICE> restart it? cc <@U0NOBODY>"})
    await workspace.settle()
    assert questions(model)[-1] == "did @Alice restart it? cc @U0NOBODY"  # unknown to users.info: its id


async def test_a_file_share_without_text_is_answered_not_read_as_hello(ws: tuple[Workspace, ScriptedModel]) -> None:
    workspace, model = ws
    files = [{"id": "F0A1", "name": "trace.log", "mimetype": "text/plain", "filetype": "text"}]
    await workspace.sender.event(message(CHANNEL, "UREQ", "", "502.1", channel_type="im", subtype="file_share",
                                         files=files) | {"channel": "D0REQ"})
    await workspace.settle()
    assert model.requests == []
    assert any("cannot read attached files" in t for t in workspace.slack.ephemeral_texts("UREQ"))

    await workspace.sender.event(message("D0REQ", "UREQ", "what does this say?", "503.1", channel_type="im",
                                         subtype="file_share", files=files))
    await workspace.settle()
    assert questions(model) == ["what does this say?\n(Attached, not read: trace.log.)"]


@pytest.mark.parametrize(("error", "told"), [
    ("not_in_channel", "Invite me with `/invite @OpsPilot`"),
    ("channel_not_found", "Ask me in a direct message with me"),
])
async def test_a_command_where_the_bot_cannot_post_is_answered_through_its_response_url(
        ws: tuple[Workspace, ScriptedModel], error: str, told: str) -> None:
    workspace, model = ws
    workspace.slack.fault("refuse", "chat.postMessage", times=1, error=error)
    status, _ = await workspace.sender.command({
        "command": "/opspilot", "text": "payments errors", "user_id": "UREQ", "channel_id": "C0NOTIN",
        "team_id": "T0001", "trigger_id": f"1.{error}", "response_url": workspace.slack.response_url()})
    await workspace.settle()
    assert status == 200 and model.requests == []
    assert [r["response_type"] for r in workspace.slack.responses] == ["ephemeral"]
    assert told in workspace.slack.responses[0]["text"]


def envelope(event: dict[str, Any]) -> str:
    return json.dumps({"token": "x", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
                       "event_id": f"Ev{time.time_ns()}", "event_time": int(time.time()), "event": event,
                       "authorizations": [{"team_id": "T0001", "user_id": "UBOT", "is_bot": True}]})


@pytest.mark.parametrize("body", [
    envelope({"type": "app_home_opened", "user": "UREQ", "channel": "D0REQ", "tab": "messages",
              "event_ts": "1.1"}),
    envelope({"type": "member_joined_channel", "user": "UREQ", "channel": CHANNEL, "channel_type": "C",
              "team": "T0001", "event_ts": "1.2"}),
    envelope({"type": "reaction_added", "user": "UREQ", "reaction": "eyes", "item_user": "UBOT",
              "item": {"type": "message", "channel": CHANNEL, "ts": "1.0"}, "event_ts": "1.3"}),
    envelope({"type": "message", "subtype": "channel_join", "user": "UREQ", "channel": CHANNEL, "ts": "1.4",
              "text": "<@UREQ> has joined the channel"}),
])
async def test_events_nobody_listens_for_are_acknowledged(ws: tuple[Workspace, ScriptedModel], body: str) -> None:
    workspace, model = ws
    status, _ = await workspace.sender.post(body, "application/json")
    await workspace.settle()
    assert status == 200 and model.requests == [] and workspace.slack.called("chat.postMessage") == []


@pytest.mark.parametrize("payload", [
    {"type": "view_submission", "team": {"id": "T0001"}, "user": {"id": "UREQ"}, "trigger_id": "2.1",
     "view": {"id": "V0", "type": "modal", "callback_id": "someone_elses_modal", "state": {"values": {}}}},
    {"type": "shortcut", "team": {"id": "T0001"}, "user": {"id": "UREQ"}, "callback_id": "unknown_global",
     "trigger_id": "2.2"},
    {"type": "message_action", "team": {"id": "T0001"}, "user": {"id": "UREQ"}, "callback_id": "unknown_message",
     "trigger_id": "2.3", "channel": {"id": CHANNEL}, "message": {"ts": "1.0", "text": "x"}},
    {"type": "block_actions", "team": {"id": "T0001"}, "user": {"id": "UREQ"}, "trigger_id": "2.4",
     "container": {"type": "message", "message_ts": "1.0", "channel_id": CHANNEL}, "channel": {"id": CHANNEL},
     "actions": [{"type": "button", "action_id": "legacy_button", "block_id": "b", "value": "v",
                  "action_ts": "1.5"}]},
])
async def test_interactions_nobody_listens_for_are_acknowledged(ws: tuple[Workspace, ScriptedModel],
                                                                payload: dict[str, Any]) -> None:
    workspace, model = ws
    status, _ = await workspace.sender.action(payload)
    await workspace.settle()
    assert status == 200 and model.requests == []
    assert [method for method, _ in workspace.slack.calls if method != "auth.test"] == []
