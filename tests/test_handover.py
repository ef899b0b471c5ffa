"""``/opspilot handover``: a channel's threads in the last hours, by their state, with links — posted whole,
whatever its length."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from bot.slack.incidents.document import render, run_state
from bot.slack.incidents.incident import gather
from bot.slack.outbound import blocks as kit
from core.messages import UserMessage
from state.records import RunRecord
from tests.slack_harness import CHANNEL, QUESTION, Workspace, ask_restart, open_workspace, restarted
from tests.toolkit import Change
from tools import ToolContext, tool


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


async def test_a_time_on_another_day_is_dated(ws: Workspace) -> None:
    """A handover spans up to a week: yesterday's 09:14 read as today's, a card expiring after midnight as
    already expired."""
    ws.slack.post_as_user(CHANNEL, "UREQ", QUESTION, ts="200.1")
    await ask_restart(ws, thread="200.1")
    handover = ws.service.inbound.incidents.handover
    assert handover is not None
    run = (await handover.entries(CHANNEL, 0))[0].run
    same_day = await handover.text(CHANNEL, 48, "en", now=run.updated_at)
    next_day = await handover.text(CHANNEL, 48, "en", now=run.updated_at + 86400)
    day = time.strftime("%m-%d", time.gmtime(run.updated_at))
    assert re.search(r"waiting for a person \(\d\d:\d\d UTC\)", same_day)
    assert re.search(rf"waiting for a person \({day} \d\d:\d\d UTC\)", next_day)


def test_a_stopped_run_says_who_stopped_it() -> None:
    """The summary's and the handover's line for a run someone stopped said "ended — Stopped", not by whom."""
    run = RunRecord(run_id="r1", thread_id="t1", text="q", status="finished", stop_reason="cancelled",
                    stopped_by="UANN", created_at=1.0, updated_at=2.0)
    assert run_state(run, "en", kit.who) == "ended — stopped by <@UANN>"
    assert run_state(run, "zh", kit.who) == "已结束 —— 已被 <@UANN> 停止"
    assert run_state(run.model_copy(update={"stopped_by": None}), "en") == "ended — Stopped"


async def test_what_people_typed_is_quoted_as_typed(ws: Workspace) -> None:
    """Slack's text field escapes & < >: quoted back escaped again, `p95 > 500ms` read `p95 &gt; 500ms` on the
    handover and App Home, and the model was asked about `&gt;`. A `<!channel>` typed as text stays text."""
    typed = "payments p95 > 500ms & errors < 1%? <!channel>"
    wire = typed.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")  # what the event carries
    ws.slack.post_as_user(CHANNEL, "UREQ", wire, ts="400.1")
    await ws.sender.event(mention(CHANNEL, "UREQ", wire, "400.1"))
    await ws.settle()
    [question] = [m.content for m in await ws.store.load_transcript(f"slack:{CHANNEL}:400.1")
                  if isinstance(m, UserMessage)]
    assert "p95 > 500ms & errors < 1%?" in question and "<!channel>" not in question, question
    await ws.sender.command({"command": "/opspilot", "text": "handover 4", "user_id": "UNEXT", "channel_id": CHANNEL,
                             "team_id": "T0001", "trigger_id": "9.6", "response_url": "https://hooks.slack.test/c"})
    await ws.settle()
    handover = all_text(next(m for m in ws.slack.messages.values() if "Handover" in all_text(m)))
    assert "p95 &gt; 500ms &amp; errors &lt; 1%?" in handover and "&amp;gt;" not in handover, handover
    assert "<!channel>" not in handover


async def test_a_change_of_unknown_outcome_is_not_called_failed_nor_answered(redis_url: str, prefix: str,
                                                                            slack: FakeSlack) -> None:
    """A change cut off by its time limit after it started: the progress said "failed" (❌), the summary "1 failed"
    and "(the worker stopped mid-change)", and the handover filed its thread under "Answered"."""
    @tool(description="A change that outlives its limit after starting.", mutating=True, timeout_s=0.2, args=Change)
    async def slow_change(args: Change, ctx: ToolContext) -> dict[str, Any]:
        await asyncio.sleep(5)
        return {}

    model = ScriptedModel([reply("", call("slow_change", "s1", target="api", environment="staging")),
                           reply("It may or may not have gone through.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[slow_change])
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "change api", "500.1"))
        await ws.settle()
        progress = next(all_text(m) for m in ws.slack.thread(CHANNEL, "500.1") if "slow_change" in all_text(m))
        assert ":grey_question:" in progress and "failed" not in progress, progress
        handover = ws.service.inbound.incidents.handover
        assert handover is not None
        text = await handover.text(CHANNEL, 4, "en")
        open_part = text.split("*Pending confirmations*")[0]
        assert "change api" in open_part and "outcome unknown" in open_part and "Answered (0)" in text, text
        doc = render(await gather(ws.store, ws.store.meta, ws.store, CHANNEL, "500.1"), None)
        assert "1 of unknown outcome" in doc and "failed" not in doc and "worker stopped" not in doc, doc
    finally:
        await ws.stop()
