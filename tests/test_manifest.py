"""manifest.yml works as is — the events, command, shortcut and modes OpsPilot needs — and asks for least privilege:
the Web API methods the code calls are read from the code, each is in scopes.yml with the scopes Slack documents
for it, and manifest.yml asks for exactly the scopes those methods, its events and its features need."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from slack_sdk.web.async_client import AsyncWebClient

import bot.slack.app as slack_app

ROOT = Path(__file__).parent.parent
MANIFEST = yaml.safe_load((ROOT / "manifest.yml").read_text(encoding="utf-8"))
TABLE = yaml.safe_load((ROOT / "scopes.yml").read_text(encoding="utf-8"))
SCANNED = ("bot", "tools", "state")

_CLIENT_CALL = re.compile(r"\.([a-z]+(?:_[A-Za-z0-9]+)+)\(")  # client.chat_postMessage(…), client.views_open(…)
_API_CALL = re.compile(r"""api_call\(\s*(?:api_method\s*=\s*)?["']([A-Za-z0-9.]+)["']""")  # api_call("chat.x")
_HELPERS = {"chat_stream": {"chat.startStream", "chat.appendStream", "chat.stopStream"},
            "files_upload_v2": {"files.getUploadURLExternal", "files.completeUploadExternal"}}
"""slack-sdk helpers that call several methods."""


def called_methods() -> dict[str, set[str]]:
    """Every Web API method the code calls → the files calling it. A name counts when slack-sdk's client has a
    method of that name (``chat_postMessage`` is ``chat.postMessage``), so Redis' and aiohttp's calls do not."""
    found: dict[str, set[str]] = {}
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            text, where = path.read_text(encoding="utf-8"), str(path.relative_to(ROOT))
            names: set[str] = set(_API_CALL.findall(text))
            for name in _CLIENT_CALL.findall(text):
                if name in _HELPERS:
                    names |= _HELPERS[name]
                elif name != "api_call" and callable(getattr(AsyncWebClient, name, None)):
                    names.add(name.replace("_", "."))
            for name in names:
                found.setdefault(name, set()).add(where)
    return found


def needed_scopes() -> dict[str, set[str]]:
    """Each scope the code, the subscribed events and the declared features need → what needs it."""
    needs: dict[str, set[str]] = {}
    for method in called_methods():
        for scope in TABLE["methods"].get(method) or []:
            needs.setdefault(scope, set()).add(method)
    for event in MANIFEST["settings"]["event_subscriptions"]["bot_events"]:
        for scope in TABLE["events"][event]:
            needs.setdefault(scope, set()).add(f"event {event}")
    for feature in ("slash_commands", "shortcuts"):
        if MANIFEST["features"].get(feature):
            for scope in TABLE["features"][feature]:
                needs.setdefault(scope, set()).add(feature)
    return needs


def test_the_scan_finds_the_calls_it_must() -> None:
    """The scan itself works: methods known to be called, in the files known to call them."""
    called = called_methods()
    assert {"bot/slack/outbound/sending.py"} <= called["chat.postMessage"]  # the outbox's sender
    assert called["views.publish"] == {"bot/slack/home/tab.py"}
    assert called["views.open"] == {"bot/slack/feedback/votes.py"}
    assert "chat.getPermalink" in called and "assistant.threads.setStatus" in called
    assert "usergroups.users.list" in called and "apps.connections.open" in called
    assert not [m for m in called if not re.fullmatch(r"[a-z]+(\.[a-z][A-Za-z]*)+", m)], called


def test_every_method_called_is_in_the_table_and_the_table_has_nothing_else() -> None:
    called, listed = set(called_methods()), set(TABLE["methods"])
    assert called - listed == set(), "add these methods and the scopes Slack documents for them to scopes.yml"
    assert listed - called == set(), "scopes.yml lists methods nothing calls any more"
    assert all(isinstance(scopes, list) for scopes in TABLE["methods"].values())


def test_the_manifest_asks_for_exactly_the_scopes_used() -> None:
    asked, needed = set(MANIFEST["oauth_config"]["scopes"]["bot"]), needed_scopes()
    assert asked - set(needed) == set(), "manifest.yml asks for scopes nothing uses"
    assert set(needed) - asked == set(), f"manifest.yml misses scopes the code needs: {needed}"
    # What the issue found unused is gone; assistant.threads.setStatus is covered by chat:write.
    assert not asked & {"im:read", "im:write", "reactions:write", "assistant:write"}
    assert needed["usergroups:read"] == {"usergroups.list", "usergroups.users.list"}
    assert needed["im:history"] == {"conversations.replies", "conversations.history", "event message.im"}


def test_every_subscribed_event_and_every_listener_is_accounted_for() -> None:
    events = set(MANIFEST["settings"]["event_subscriptions"]["bot_events"])
    assert events == set(TABLE["events"])
    app = (ROOT / "bot" / "slack" / "app.py").read_text(encoding="utf-8")
    listened = set(re.findall(r'@app\.event\("([a-z_]+)"\)', app))
    assert listened == {"app_mention", "message", "app_home_opened"}
    for event in listened:  # a listener without a subscription never hears anything
        assert any(e == event or e.startswith(f"{event}.") for e in events), event


def test_events_command_shortcut_and_modes() -> None:
    settings = MANIFEST["settings"]
    assert set(settings["event_subscriptions"]["bot_events"]) == {
        "app_mention", "app_home_opened", "message.im", "message.channels", "message.groups"}
    assert MANIFEST["features"]["app_home"]["home_tab_enabled"] is True
    assert settings["interactivity"]["is_enabled"] is True and settings["socket_mode_enabled"] is True
    assert [c["command"] for c in MANIFEST["features"]["slash_commands"]] == ["/opspilot"]
    assert MANIFEST["features"]["bot_user"]["display_name"] == "OpsPilot"
    shortcuts = {s["callback_id"]: s for s in MANIFEST["features"]["shortcuts"]}
    assert shortcuts["opspilot_investigate_message"]["type"] == "message"
    app = (ROOT / "bot" / "slack" / "app.py").read_text(encoding="utf-8")
    listened = {literal or getattr(slack_app, name) for literal, name in
                re.findall(r'@app\.shortcut\((?:"([^"]+)"|([A-Z_]+))\)', app)}
    assert set(shortcuts) <= listened  # each shortcut the manifest declares has its listener
