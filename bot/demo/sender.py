"""Sends properly signed Slack requests (Events API, interactivity, slash commands) to an app: the demo page's
backend uses it to reach the bot, the tests and benchmarks to play Slack."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time
from typing import Any
from urllib.parse import urlencode

import aiohttp

_ids = itertools.count(1)


def signature(secret: str, timestamp: str, body: str) -> str:
    base = f"v0:{timestamp}:{body}".encode()
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


class SlackSender:
    def __init__(self, url: str, secret: str) -> None:
        self.url = url
        self.secret = secret

    async def post(self, body: str, content_type: str, *, retry_num: int | None = None,
                   secret: str | None = None, timestamp: float | None = None) -> tuple[int, str]:
        ts = str(int(timestamp if timestamp is not None else time.time()))
        headers = {"Content-Type": content_type, "X-Slack-Request-Timestamp": ts,
                   "X-Slack-Signature": signature(secret or self.secret, ts, body)}
        if retry_num is not None:
            headers |= {"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": "http_timeout"}
        async with aiohttp.ClientSession() as session, session.post(self.url, data=body.encode(),
                                                                     headers=headers) as response:
            return response.status, await response.text()

    async def event(self, event: dict[str, Any], *, event_id: str | None = None, **kw: Any) -> tuple[int, str]:
        envelope = {"token": "legacy", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
                    "event_id": event_id or f"Ev{next(_ids):08d}", "event_time": int(time.time()),
                    "event": {"event_ts": event.get("ts"), **event},
                    "authorizations": [{"team_id": "T0001", "user_id": "UBOT", "is_bot": True}]}
        return await self.post(json.dumps(envelope), "application/json", **kw)

    async def action(self, payload: dict[str, Any], **kw: Any) -> tuple[int, str]:
        body = urlencode({"payload": json.dumps(payload)})
        return await self.post(body, "application/x-www-form-urlencoded", **kw)

    async def command(self, fields: dict[str, str], **kw: Any) -> tuple[int, str]:
        return await self.post(urlencode(fields), "application/x-www-form-urlencoded", **kw)


def mention(channel: str, user: str, text: str, ts: str, thread_ts: str | None = None) -> dict[str, Any]:
    event = {"type": "app_mention", "channel": channel, "user": user, "text": f"<@UBOT> {text}", "ts": ts}
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


def message(channel: str, user: str, text: str, ts: str, thread_ts: str | None = None,
            channel_type: str = "channel", **extra: Any) -> dict[str, Any]:
    event = {"type": "message", "channel": channel, "user": user, "text": text, "ts": ts,
             "channel_type": channel_type, **extra}
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


def block_action(*, user: str, channel: str, message: dict[str, Any], action_id: str, value: str,
                 state: dict[str, Any] | None = None, response_url: str = "") -> dict[str, Any]:
    """A click as Slack sends it; ``response_url``: one the local Slack made for ``message``
    (:meth:`bot.demo.workspace.LocalSlack.response_url`), else none that answers."""
    return {
        "type": "block_actions", "team": {"id": "T0001"}, "user": {"id": user, "username": user},
        "api_app_id": "A0001", "token": "legacy", "trigger_id": "1.2.3",
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": channel},
        "channel": {"id": channel}, "message": {"ts": message["ts"], "thread_ts": message.get("thread_ts"),
                                                 "blocks": message.get("blocks", []), "type": "message"},
        "state": state or {"values": {}}, "response_url": response_url,
        "actions": [{"type": "button", "action_id": action_id, "block_id": "b", "value": value,
                     "action_ts": f"{time.time():.6f}"}],
    }


def view_submission(*, user: str, view: dict[str, Any], values: dict[str, Any] | None = None) -> dict[str, Any]:
    """A modal's submission as Slack sends it: the view that was opened (``views.open``'s answer) with its inputs'
    state (``{block_id: {action_id: {type, value | selected_option}}}``)."""
    return {
        "type": "view_submission", "team": {"id": "T0001", "domain": "fake"},
        "user": {"id": user, "username": user, "team_id": "T0001"}, "api_app_id": "A0001", "token": "legacy",
        "trigger_id": f"{next(_ids)}.4.5", "is_enterprise_install": False, "enterprise": None, "response_urls": [],
        "view": {"id": view.get("id", "V0001"), "team_id": "T0001", "type": "modal",
                 "callback_id": view.get("callback_id", ""), "private_metadata": view.get("private_metadata", ""),
                 "blocks": view.get("blocks", []), "title": view.get("title"), "hash": view.get("hash", "1.h"),
                 "state": {"values": values or {}}, "app_id": "A0001", "bot_id": "B0001",
                 "root_view_id": view.get("id", "V0001"), "previous_view_id": None, "external_id": ""},
    }
