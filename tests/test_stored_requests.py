"""A Slack request a front stored is acknowledged as read only once its work is done: work that failed with a bug
or a dependency error (not an outage) is read again and, failing each time, set aside in the dead letters — never
acknowledged with its work lost (an alert neither investigated nor offered, with one line in a log)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult

from bot.slack.inbound.background import Background
from bot.slack.inbound.work_items import Delivery
from bot.slack.service import _reader

EVENT = {"type": "event_callback", "team_id": "T1", "api_app_id": "A1", "event_id": "Ev1", "event_time": 1,
         "event": {"type": "message", "channel": "C1", "user": "U1", "text": "hi", "ts": "1.1"}}


def app(work: Any) -> AsyncApp:
    tasks = Background()
    async def authorize() -> AuthorizeResult:  # no auth.test: nothing here talks to Slack
        return AuthorizeResult(enterprise_id=None, team_id="T1", bot_token="xoxb-test", bot_user_id="UBOT")

    bolt = AsyncApp(name="test", signing_secret="s", process_before_response=True,
                    request_verification_enabled=False, authorize=authorize)

    @bolt.event("message")
    async def on_message() -> None:
        await tasks.now(work(), "message-C1")

    return bolt


async def test_a_stored_request_whose_work_failed_is_not_read_as_done() -> None:
    async def broken() -> None:
        raise KeyError("thread_ts")  # a bug on the alert's path, after its dedupe marker was set

    delivery = Delivery(body=json.dumps(EVENT), content_type="application/json", received_at=0.0)
    with pytest.raises(RuntimeError, match="KeyError"):
        await _reader(lambda: app(broken))(delivery, "1-0")

    done: list[str] = []

    async def fine() -> None:
        done.append("yes")

    await _reader(lambda: app(fine))(delivery, "1-1")  # read as done: acknowledged
    assert done == ["yes"]
