"""The bot's identity without a round trip to Slack per event: a question that arrives while auth.test answers
5xx is not acknowledged (503, so Slack delivers it again) instead of a 200 and a silent drop; once known, the
identity is cached in Redis, so a process started during a Slack outage answers at once."""

from __future__ import annotations

import asyncio

from bot.agent.models.scripted import ScriptedModel, reply
from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from tests.slack_harness import CHANNEL, open_workspace


def answers(slack: FakeSlack, thread: str) -> list[str]:
    return [all_text(m) for m in slack.thread(CHANNEL, thread) if m.get("bot") and "here I am" in all_text(m)]


async def test_a_question_during_an_auth_test_outage_is_answered_once_slack_is_back(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    outage = slack.fault("error", "auth.test", for_s=7, status=503)
    ws = await open_workspace(redis_url, prefix, slack, model=ScriptedModel([reply("here I am")]), specs=[])
    try:
        event = mention(CHANNEL, "UREQ", "anyone there?", "60.1")
        status, _ = await ws.sender.event(event, event_id="EvOUTAGE1")
        assert status == 503  # not acknowledged: Slack keeps it and delivers it again
        for _ in range(300):  # Slack's own retries come later; this one as soon as auth.test answers again
            if not outage.applies("auth.test"):
                break
            await asyncio.sleep(0.2)
        status, _ = await ws.sender.event(event, event_id="EvOUTAGE1", retry_num=1)
        assert status == 200
        await ws.settle()
        assert len(answers(slack, "60.1")) == 1
        status, _ = await ws.sender.event(event, event_id="EvOUTAGE1", retry_num=2)  # a late duplicate
        await ws.settle()
        assert status == 200 and len(answers(slack, "60.1")) == 1
    finally:
        await ws.stop()

    slack.fault("error", "auth.test", for_s=60, status=500)  # down again; a new process comes up
    ws = await open_workspace(redis_url, prefix, slack, model=ScriptedModel([reply("here I am")]), specs=[])
    try:
        status, _ = await ws.sender.event(mention(CHANNEL, "UREQ", "still there?", "61.1"))
        await ws.settle()
        assert status == 200 and len(answers(slack, "61.1")) == 1  # the identity came from Redis
    finally:
        await ws.stop()
