"""``/opspilot handover``: a channel's threads in the last hours, by their state, with links — posted whole,
whatever its length."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from tests.slack_harness import CHANNEL, QUESTION, Workspace, ask_restart, open_workspace, restarted


@pytest.fixture
async def ws(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[Workspace]:
    workspace = await open_workspace(redis_url, prefix, slack, language="auto")
    yield workspace
    await workspace.stop()


async def test_handover_lists_three_threads_with_their_states_and_links(ws: Workspace) -> None:
    await restarted(ws, "100.1")  # answered, restart done
    ws.slack.post_as_user(CHANNEL, "UREQ", QUESTION, ts="200.1")
    await ask_restart(ws, thread="200.1")  # waits for a confirmation
    ws.slack.post_as_user(CHANNEL, "UBOB", "payments errors?", ts="300.1")
    await ws.sender.event(mention(CHANNEL, "UBOB", "payments errors?", "300.1"))
    await ws.settle()

    await ws.sender.command({"command": "/opspilot", "text": "handover 4", "user_id": "UNEXT", "channel_id": CHANNEL,
                             "team_id": "T0001", "trigger_id": "9.9", "response_url": "https://hooks.slack.test/c"})
    await ws.settle()
    text = all_text(next(m for m in ws.slack.messages.values() if "Handover" in all_text(m)))
    open_part, rest = text.split("Pending confirmations", 1)
    pending, answered = rest.split("Answered (2)", 1)
    assert "p2001" in open_part and "waiting for a person" in open_part and "p1001" not in open_part
    assert "`restart_service` `payments` @ `prod`" in pending and "<@UREQ>" in pending and "p2001" in pending
    assert "p1001" in answered and "p3001" in answered
    # Each thread by what it is about (its first question), not by its latest "restart it in prod".
    assert QUESTION[:40] in answered and "restart it in prod" not in text
    assert "No follow-ups are scheduled" in text


async def test_a_long_handover_is_posted_whole(ws: Workspace) -> None:
    """25 threads waiting for a confirmation: the handover was one section cut at 3,000 characters, listing 2 of
    them and none of the follow-ups or answers, without a word that it was cut."""
    for i in range(25):
        ws.slack.post_as_user(CHANNEL, "UREQ", QUESTION, ts=f"{200 + i}.1")
        await ask_restart(ws, thread=f"{200 + i}.1")
    await ws.sender.command({"command": "/opspilot", "text": "handover 4", "user_id": "UNEXT", "channel_id": CHANNEL,
                             "team_id": "T0001", "trigger_id": "9.7", "response_url": "https://hooks.slack.test/c"})
    await ws.settle()
    posted = [m for (c, _), m in sorted(ws.slack.messages.items()) if c == CHANNEL and m.get("bot")
              and m.get("thread_ts") is None]  # the handover's messages: the threads' are replies
    text = "\n".join(b["text"]["text"] for m in posted for b in m["blocks"] if b.get("text"))  # (not the fallback)
    pending = text.split("Pending confirmations", 1)[1]
    assert pending.count("`restart_service`") == 25 and "No follow-ups are scheduled" in text
