"""manifest.yml works as is: the scopes, events, command and modes the issue asks for."""

from __future__ import annotations

from pathlib import Path

import yaml

MANIFEST = yaml.safe_load((Path(__file__).parent.parent / "manifest.yml").read_text(encoding="utf-8"))


def test_scopes_events_command_and_modes() -> None:
    assert set(MANIFEST["oauth_config"]["scopes"]["bot"]) == {
        "app_mentions:read", "chat:write", "channels:history", "groups:history", "im:history", "im:read",
        "im:write", "commands", "usergroups:read", "reactions:write", "users:read", "assistant:write"}
    settings = MANIFEST["settings"]
    assert set(settings["event_subscriptions"]["bot_events"]) == {
        "app_mention", "app_home_opened", "message.im", "message.channels", "message.groups"}
    assert MANIFEST["features"]["app_home"]["home_tab_enabled"] is True
    assert settings["interactivity"]["is_enabled"] is True and settings["socket_mode_enabled"] is True
    assert [c["command"] for c in MANIFEST["features"]["slash_commands"]] == ["/opspilot"]
    assert MANIFEST["features"]["bot_user"]["display_name"] == "OpsPilot"
    [shortcut] = MANIFEST["features"]["shortcuts"]
    assert shortcut["type"] == "message" and shortcut["callback_id"] == "opspilot_investigate_message"
    app = (Path(__file__).parent.parent / "bot" / "slack" / "app.py").read_text(encoding="utf-8")
    assert f'app.shortcut("{shortcut["callback_id"]}")' in app
