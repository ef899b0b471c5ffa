"""The Slack surface end to end: Bolt's real HTTP endpoint, signed requests, a fake workspace."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from bot.agent.models.base import Completion
from bot.agent.models.demo import demo_model
from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.agent.transcript import violations
from bot.demo.sender import block_action, mention, message
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from core.messages import Message, ToolResultMessage
from tests.conftest import until
from tests.slack_harness import CHANNEL, QUESTION, Workspace, open_workspace, progress_of
from tests.toolkit import Probe, toolkit
from tools.registry import ToolDefinition


class ShownStepByStep:
    """The demo model, each step after the first waiting until the thread's progress message is in Slack: the
    steps are shown live on any machine (a run faster than delivery is shown once, in its final state)."""

    def __init__(self, slack: FakeSlack, thread_ts: str) -> None:
        self.inner, self.slack, self.thread_ts, self.steps = demo_model(), slack, thread_ts, 0
        self.label, self.scripted = self.inner.label, self.inner.scripted

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def complete(self, messages: Sequence[Message], tools: Sequence[ToolDefinition],
                       **options: Any) -> Completion:
        if self.steps:
            await until(lambda: any("step" in all_text(m) for m in self.slack.thread(CHANNEL, self.thread_ts)))
        self.steps += 1
        return await self.inner.complete(messages, tools, **options)


async def test_mention_shows_live_steps_and_a_final_answer(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    ws = await open_workspace(redis_url, prefix, slack, model=ShownStepByStep(slack, "100.1"))
    try:
        await _shows_live_steps_and_a_final_answer(ws)
    finally:
        await ws.stop()


async def _shows_live_steps_and_a_final_answer(ws: Workspace) -> None:
    status, _ = await ws.sender.event(mention(CHANNEL, "UREQ", QUESTION, "100.1"))
    assert status == 200
    await ws.settle()

    thread = ws.slack.thread(CHANNEL, "100.1")
    progress = progress_of(ws.slack, "100.1")
    text = all_text(progress)
    assert ":white_check_mark: Done" in text and "search_resource" in text and "search_docs" in text
    assert buttons(progress) == []  # the Stop button is gone once finished
    assert progress["edits"] >= 1 and "scripted demo model" in text
    answer = thread[-1]
    assert answer["thread_ts"] == "100.1" and "docs/payments-db-timeouts.md" in all_text(answer)
    assert ws.slack.rejected == []


async def test_a_retried_event_and_the_mention_message_pair_start_one_run(ws: Workspace) -> None:
    event = mention(CHANNEL, "UREQ", QUESTION, "300.1")
    await ws.sender.event(event, event_id="EvSAME")
    await ws.sender.event(event, event_id="EvSAME", retry_num=1)
    # Slack also delivers the same message as a `message` event with another id.
    await ws.sender.event(message(CHANNEL, "UREQ", f"<@UBOT> {QUESTION}", "300.1"), event_id="EvOTHER")
    await ws.settle()
    assert len(ws.slack.called("chat.postMessage")) == 2  # one progress message, one answer
    assert (await ws.store.stats(3600)).runs == 1


async def test_bots_edits_and_unrelated_messages_never_start_a_run(ws: Workspace) -> None:
    await ws.sender.event(message(CHANNEL, "UBOT", "my own message", "400.1", bot_id="B0001"))
    await ws.sender.event(message(CHANNEL, "UOTHER", "another bot", "400.2", bot_id="B0009"))
    await ws.sender.event(message(CHANNEL, "UREQ", "edited", "400.3", subtype="message_changed"))
    await ws.sender.event(message(CHANNEL, "UREQ", "just chatting", "400.4"))
    await ws.settle()
    assert ws.slack.called("chat.postMessage") == []


async def test_forged_and_stale_signatures_are_rejected(ws: Workspace) -> None:
    forged, _ = await ws.sender.event(mention(CHANNEL, "UREQ", "hi", "500.1"), secret="wrong")
    stale, _ = await ws.sender.event(mention(CHANNEL, "UREQ", "hi", "500.2"), timestamp=time.time() - 600)
    await ws.settle()
    assert (forged, stale) == (401, 401)
    assert ws.slack.called("chat.postMessage") == []


async def test_a_follow_up_in_the_thread_needs_no_mention_and_dms_work(ws: Workspace) -> None:
    await ws.sender.event(mention(CHANNEL, "UREQ", "payments errors", "600.1"))
    await ws.settle()
    await ws.sender.event(message(CHANNEL, "UREQ", "and the runbook for rollbacks?", "600.2", thread_ts="600.1"))
    await ws.sender.event(message("D0DM", "UREQ", "orders errors", "600.3", channel_type="im"))
    await ws.settle()
    assert (await ws.store.stats(3600)).runs == 3
    assert any("Order Service" in all_text(m) for m in ws.slack.thread("D0DM", "600.3"))


async def test_the_slash_command_answers_in_a_new_thread(ws: Workspace) -> None:
    status, _ = await ws.sender.command({"command": "/opspilot", "text": "payments errors", "user_id": "UREQ",
                                         "channel_id": CHANNEL, "team_id": "T0001", "trigger_id": "1.2",
                                         "response_url": "https://hooks.slack.test/c"})
    await ws.settle()
    assert status == 200
    root = ws.slack.called("chat.postMessage")[0]
    assert "asked: payments errors" in root["text"] and root.get("thread_ts") is None
    root_ts = next(ts for (c, ts), m in ws.slack.messages.items() if m["text"] == root["text"])
    assert "Payment Service" in all_text(ws.slack.thread(CHANNEL, root_ts)[-1])


async def test_users_outside_the_allowlist_are_told_and_nothing_runs(redis_url: str, prefix: str,
                                                                     slack: FakeSlack) -> None:
    ws = await open_workspace(redis_url, prefix, slack, allowed_channels=[CHANNEL], allowed_users=["UREQ"])
    try:
        await ws.sender.event(mention(CHANNEL, "USTRANGER", "payments errors", "700.1"))
        await ws.sender.event(mention("C0OTHER", "UREQ", "payments errors", "700.2"))
        await ws.settle()
        assert ws.slack.called("chat.postMessage") == []
        assert any("not on the list" in t for t in ws.slack.ephemeral_texts("USTRANGER"))
        assert any("not enabled in this channel" in t for t in ws.slack.ephemeral_texts("UREQ"))
    finally:
        await ws.stop()


async def test_stop_cancels_the_run_and_answers_every_call(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("blocker", "b1"), call("lookup_a", "a1"))])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[tools["blocker"], tools["lookup_a"]])
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "go", "800.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 10)
        await asyncio.sleep(0.2)
        progress = progress_of(slack, "800.1")
        stop = next(b for b in buttons(progress) if b["action_id"] == "opspilot_stop")
        await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=progress,
                                            action_id="opspilot_stop", value=stop["value"]))
        await ws.settle()
        final = progress_of(slack, "800.1")
        assert ":no_entry_sign: Stopped" in all_text(final) and buttons(final) == []
        transcript = await ws.store.load_transcript("slack:C0OPS:800.1")
        assert violations(transcript) == []
        statuses = {m.call_id: m.status for m in transcript if isinstance(m, ToolResultMessage)}
        assert statuses == {"b1": "cancelled", "a1": "ok"}
    finally:
        await ws.stop()


async def test_429_on_chat_update_is_retried_and_the_final_state_arrives(ws: Workspace) -> None:
    ws.slack.rate_limit_next("chat.update", 2)
    await ws.sender.event(mention(CHANNEL, "UREQ", QUESTION, "900.1"))
    await ws.settle()
    assert ws.slack.rate_limited == 2
    assert ":white_check_mark: Done" in all_text(progress_of(ws.slack, "900.1"))
    assert ws.service.metrics.value("opspilot_slack_rate_limited_total") == 2


async def test_a_dead_worker_mid_read_is_found_and_its_run_carried_on(redis_url: str, prefix: str,
                                                                      slack: FakeSlack) -> None:
    """Its step only read: nobody is asked to press Resume (issue 33); a change in flight still waits for one
    (tests/test_catchup.py)."""
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("", call("blocker", "b1")), reply("I finished after the restart.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[tools["blocker"]])
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "go", "990.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 10)
        for task in list(ws.service.inbound.tasks.running):  # the worker dies: its tasks vanish mid-run
            task.cancel()
        await asyncio.sleep(0.2)
        await ws.service.core.sweeps.sweep(now=time.time() + 600)
        await ws.settle()
        assert "I finished after the restart." in all_text(slack.thread(CHANNEL, "990.1")[-1])
        assert not any(b["action_id"] == "opspilot_resume" for m in slack.thread(CHANNEL, "990.1")
                       for b in buttons(m))
        transcript = await ws.store.load_transcript("slack:C0OPS:990.1")
        assert violations(transcript) == []
        # Its read-only step was saved with nothing (a step's one write comes with its results): thought again.
        assert not any(isinstance(m, ToolResultMessage) for m in transcript)
        assert probe.count("blocker") == 1
    finally:
        await ws.stop()


async def test_health_and_metrics(ws: Workspace) -> None:
    import aiohttp

    await ws.sender.event(mention(CHANNEL, "UREQ", QUESTION, "1000.1"))
    await ws.settle()
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{ws.server.url}/healthz") as r:
            assert r.status == 200 and (await r.json())["ok"] is True
        async with session.get(f"{ws.server.url}/metrics") as r:
            body = await r.text()
    assert "opspilot_runs_total 1" in body
    assert 'opspilot_tool_calls_total{status="ok"} 4' in body  # catalog + runbooks, then logs + metrics
    assert 'opspilot_runs_finished_total{reason="final_answer"} 1' in body
    assert "# TYPE opspilot_interrupts_pending gauge" in body


async def test_a_long_answer_is_split_within_slack_limits(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    long_answer = "\n".join(f"line {i}: " + "x" * 200 for i in range(800))  # ~170,000 characters
    ws = await open_workspace(redis_url, prefix, slack, model=ScriptedModel([reply(long_answer)]), specs=[])
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "tell me everything", "1100.1"))
        await ws.settle()
        answers = [m for m in slack.thread(CHANNEL, "1100.1") if "line 0:" in all_text(m) or "line 799" in all_text(m)
                   or any("line " in b.get("text", {}).get("text", "") for b in m["blocks"] if b["type"] == "section")]
        assert slack.rejected == []
        assert len(answers) >= 2  # more than 50 sections of ≤3000 characters
        sections = [b["text"]["text"] for m in answers for b in m["blocks"] if b["type"] == "section"]
        assert all(len(s) <= 3000 for s in sections)
        assert all(s.startswith("_(continued)_\n") for s in sections[1:])  # each part after the first says so
        assert "".join(s.removeprefix("_(continued)_\n") for s in sections).replace("\n", "") == \
            long_answer.replace("\n", "")
    finally:
        await ws.stop()


async def test_each_sweep_fires_once_across_instances(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    other = await open_workspace(redis_url, prefix, slack)
    first = await open_workspace(redis_url, prefix, slack)
    try:
        swept = await asyncio.gather(first.service.core.sweeps.tick(), other.service.core.sweeps.tick())
        assert sorted(swept) == [False, True]
        reminded = await asyncio.gather(first.service.reminders.tick(), other.service.reminders.tick())
        assert sorted(reminded) == [False, True]
    finally:
        await first.stop()
        await other.stop()
