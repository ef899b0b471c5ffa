"""A stream that falls back to a plain message is stopped before it is edited, whatever Slack does to that stop:
one un-paced, un-retried ``chat.stopStream`` that Slack rate-limited left the message streaming, every later edit
of it refused (``message_is_streaming``) and dropped — a finished step shown in progress, the run's end never."""

from __future__ import annotations

import asyncio
import time

from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from tests.slack_harness import CHANNEL, open_workspace
from tests.toolkit import Probe, toolkit


async def test_a_fallen_back_streams_stop_slack_refused_for_now_is_tried_again(redis_url: str, prefix: str,
                                                                               slack: FakeSlack) -> None:
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("Look.", call("blocker", "b1")), reply("", call("lookup_a", "a1")),
                           reply("All fine.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="stream",
                              specs=[tools["blocker"], tools["lookup_a"]], request_timeout_s=2.0)
    try:
        slack.post_as_user(CHANNEL, "UREQ", "how is payments?", ts="940.1")  # a stream answers a message there
        await ws.sender.event(mention(CHANNEL, "UREQ", "how is payments?", "940.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 30)
        for _ in range(1200):  # until the stream shows the step under way
            if any(t["status"] == "in_progress" for m in slack.streams_started
                   for t in (m.get("stream") or {}).get("tasks", [])):
                break
            await asyncio.sleep(0.05)
        # Slack refuses the stream's next call (its end: falls back to a message), then rate-limits the stop that
        # ends the stream before the message is edited.
        slack.fault("refuse", "chat.appendStream", "chat.stopStream", times=1, error="invalid_chunks")
        slack.fault("limited", "chat.stopStream", times=1)
        probe.release.set()

        def shown() -> tuple[list[dict], list[dict], list[dict]]:
            bot = [m for m in slack.thread(CHANNEL, "940.1") if m.get("bot")]
            live = [m for m in slack.streams_started if slack._streaming(m)]
            stale = [m for m in bot if any(t["status"] == "in_progress"
                                           for t in (m.get("stream") or {}).get("tasks", []))]
            return bot, live, stale

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the run's end is shown (the stop's retry waits Retry-After)
            await ws.settle()
            bot, live, stale = shown()
            if not live and not stale and any("All fine." in all_text(m) for m in bot):
                break
            await asyncio.sleep(0.2)
        bot, live, stale = shown()
        assert not live and not stale, [all_text(m)[:120] for m in bot]
        assert sum("All fine." in all_text(m) for m in bot) == 1
        assert not [m for m in bot if any(b["action_id"] == "opspilot_stop" for b in buttons(m))]
    finally:
        probe.release.set()
        await ws.stop()


async def test_a_fallen_back_streams_end_goes_ahead_of_progress_still_moving(redis_url: str, prefix: str,
                                                                            slack: FakeSlack) -> None:
    """In a workspace without Slack's streaming API (auto mode falls back to an edited message), with the edit
    budget down to its reserve: the run's end — its answer rides with it — waited like progress still moving,
    "Working on it…" and a live Stop shown for a minute after the run had ended. A run's end is settled, as in
    update mode."""
    slack.streams_supported = False
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("Look.", call("blocker", "b1")), reply("All fine.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="auto", specs=[tools["blocker"]],
                              posts_per_second=50, updates_per_minute=1)
    try:
        slack.post_as_user(CHANNEL, "UREQ", "how is payments?", ts="930.1")
        await ws.sender.event(mention(CHANNEL, "UREQ", "how is payments?", "930.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 30)
        pacer = ws.service.outbox.pacer
        rate, cap = pacer._tiers["chat.update"]  # other runs' edits took the budget down to its reserve
        while (await pacer._take("chat.update", rate, cap, 2.0, max_wait_s=0.0)).taken:
            pass
        probe.release.set()
        deadline = time.monotonic() + 45  # a settled end goes within seconds; one waiting as progress, ~60 s
        while time.monotonic() < deadline:
            bot = [m for m in slack.thread(CHANNEL, "930.1") if m.get("bot")]
            if any("All fine." in all_text(m) for m in bot):
                break
            await asyncio.sleep(0.2)
        await ws.settle()
        bot = [m for m in slack.thread(CHANNEL, "930.1") if m.get("bot")]
        assert any("All fine." in all_text(m) for m in bot), [all_text(m)[:80] for m in bot]
        assert not [m for m in bot if any(b["action_id"] == "opspilot_stop" for b in buttons(m))]
    finally:
        probe.release.set()
        await ws.stop()


async def test_a_stream_slack_will_not_stop_does_not_hold_back_the_answer(redis_url: str, prefix: str,
                                                                          slack: FakeSlack) -> None:
    """Slack refusing every stop for good (not "not streaming": it will not stop) made each round stop it again and
    come back, the answer queued behind it until Slack's stream timeout, minutes later. Such an edit is dropped,
    as any refused one, and the answer goes."""
    probe = Probe()
    tools = toolkit(probe)
    model = ScriptedModel([reply("Look.", call("blocker", "b1")), reply("All fine.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, progress="stream", specs=[tools["blocker"]],
                              request_timeout_s=2.0)
    try:
        slack.post_as_user(CHANNEL, "UREQ", "how is payments?", ts="940.1")
        await ws.sender.event(mention(CHANNEL, "UREQ", "how is payments?", "940.1"))
        await asyncio.wait_for(probe.started.setdefault("blocker", asyncio.Event()).wait(), 30)
        for _ in range(1200):  # until the stream has started
            if slack.streams_started:
                break
            await asyncio.sleep(0.05)
        slack.fault("refuse", "chat.stopStream", error="invalid_arguments")  # every stop, for good
        probe.release.set()
        deadline = time.monotonic() + 45  # the answer goes within seconds; held, it waited minutes
        while time.monotonic() < deadline:
            if any("All fine." in all_text(m) for m in slack.thread(CHANNEL, "940.1") if m.get("bot")):
                break
            await asyncio.sleep(0.2)
        assert any("All fine." in all_text(m) for m in slack.thread(CHANNEL, "940.1") if m.get("bot"))
        assert len(slack.called("chat.stopStream")) <= 4  # not stopped again and again
    finally:
        probe.release.set()
        await ws.stop()
