"""Follow-ups as people and the model meet them: the ``schedule_followup`` tool and its limits, the "Re-check in
10 min" button under an answer that reports a change, Cancel in the thread and in App Home, and a follow-up that
outlives a restart of OpsPilot and compares with the numbers from before it."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.demo.sender import block_action, mention, message
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.followup_tool import followup_tool
from bot.slack.followups.buttons import CANCEL, RECHECK
from bot.slack.inbound.thread_log import followup_events
from bot.slack.outbound.audit import ran_a_change
from bot.slack.outbound.thread_meta import thread_key
from core.messages import ToolResultMessage, UserMessage
from tests.language_scan import english_runs
from tests.slack_harness import CHANNEL, Workspace, open_workspace
from tests.test_timers import QUESTION, Clock, asked, clock_of, open_at, schedule, tick, turns
from tests.toolkit import Probe, toolkit


@pytest.fixture
async def ws(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[Workspace]:
    workspace = await open_at(redis_url, prefix, slack, Clock())
    yield workspace
    await workspace.stop()


def results(transcript: list, name: str = "schedule_followup") -> list[dict]:
    return [json.loads(m.content) for m in transcript if isinstance(m, ToolResultMessage) and m.name == name]


async def test_the_model_schedules_follow_ups_within_limits_and_reads_each_refusal(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    def sched(minutes: int, q: str = "is payments holding?") -> object:
        return call("schedule_followup", after_minutes=minutes, question=q)

    model = ScriptedModel([reply("", sched(10), sched(20), sched(0), sched(241), sched(30)),
                           reply("", sched(40)), reply("Scheduled three re-checks."),
                           reply("Noted.")])
    clock = Clock()
    ws = await open_at(redis_url, prefix, slack, clock, model=model, specs=[])
    assert ws.service.core.followups is not None
    ws.service.core.engine.deps.registry.add(followup_tool(ws.service.core.followups))
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "re-check payments every 10 minutes", "600.1"))
        await ws.settle()
        thread_id = thread_key(CHANNEL, "600.1")
        found = results(await ws.store.load_transcript(thread_id))
        assert [r["ok"] for r in found] == [True, True, False, False, True, False]
        assert found[2]["errorCode"] == found[3]["errorCode"] == "after_minutes_out_of_range"
        assert "between 1 and 240" in found[3]["message"] and "Nothing was scheduled" in found[3]["message"]
        assert found[5]["errorCode"] == "too_many_followups" and "at most 3" in found[5]["message"]
        assert len(await ws.store.timers.pending(thread_id)) == 3
        announcements = [m for m in slack.thread(CHANNEL, "600.1") if any(
            b["action_id"] == CANCEL for b in buttons(m))]
        assert len(announcements) == 3 and "requested by <@UREQ>" in all_text(announcements[0])

        # A follow-up turn runs unattended: it cannot schedule more follow-ups (no chain nobody asked for).
        model._script = [reply("", sched(10)), reply("Noted.")]  # type: ignore[attr-defined]
        model._position = 0  # type: ignore[attr-defined]
        first = (await ws.store.timers.pending(thread_id))[0]
        clock.now = first.due
        assert await tick(ws) == 1
        await ws.settle()
        refused = results(await ws.store.load_transcript(thread_id))[-1]
        assert refused["errorCode"] == "unattended" and "No person asked for this run" in refused["message"]
        assert len(await ws.store.timers.pending(thread_id)) == 2
    finally:
        await ws.stop()


async def test_a_cancel_button_of_another_conversation_cancels_nothing(redis_url: str, prefix: str,
                                                                       slack: FakeSlack) -> None:
    """A private channel's follow-up id, seen elsewhere, forged into a button in a public channel: nothing is
    cancelled and nothing is said, there or in the private channel (App Home's refusal, for a channel's button)."""
    slack.private.add(CHANNEL)
    slack.members[CHANNEL] = {"UBOT", "UREQ"}
    ws = await open_at(redis_url, prefix, slack, Clock())
    try:
        timer = await schedule(ws, await asked(ws))
        before = {key: all_text(m) for key, m in slack.messages.items()}
        posted = slack.post_as_user("C0PUB", "UMAL", "hello")
        await ws.sender.action(block_action(user="UMAL", channel="C0PUB", message={"ts": posted["ts"], "blocks": []},
                                            action_id=CANCEL, value=timer.id))
        await ws.settle()
        assert await ws.store.timers.get(timer.id) is not None
        assert {k: all_text(m) for k, m in slack.messages.items() if k in before} == before
        assert slack.ephemeral_texts("UMAL") == []
    finally:
        await ws.stop()


async def test_cancel_from_the_announcement_stops_it_and_says_who(redis_url: str, prefix: str,
                                                                  slack: FakeSlack) -> None:
    ws = await open_at(redis_url, prefix, slack, Clock(), allowed_users=["UREQ", "UMATE"])
    try:
        thread_id = await asked(ws)
        timer = await schedule(ws, thread_id)
        announcement = copy.deepcopy(slack.thread(CHANNEL, "500.1")[-1])
        cancel = next(b for b in buttons(announcement) if b["action_id"] == CANCEL)
        await ws.sender.action(block_action(user="UOUT", channel=CHANNEL, message=announcement, action_id=CANCEL,
                                            value=cancel["value"]))
        await ws.settle()
        assert await ws.store.timers.get(timer.id) is not None  # not allowed to use OpsPilot: nothing changed
        # Two at once: one cancels it, the other is told it is no longer pending (it was told nothing).
        await asyncio.gather(*(ws.sender.action(block_action(user=who, channel=CHANNEL, message=announcement,
                                                             action_id=CANCEL, value=cancel["value"]))
                               for who in ("UMATE", "UREQ")))
        await ws.settle()
        assert await ws.store.timers.get(timer.id) is None
        shown = slack.messages[(CHANNEL, announcement["ts"])]
        by = "UMATE" if "cancelled by <@UMATE>" in all_text(shown) else "UREQ"
        assert f"cancelled by <@{by}>" in all_text(shown) and buttons(shown) == []
        other = "UREQ" if by == "UMATE" else "UMATE"
        assert any("no longer pending" in t for t in slack.ephemeral_texts(other))
        slack.ephemerals.clear()
        clock_of(ws).now = timer.due + 1
        assert await tick(ws) == 0
        await ws.settle()
        assert await turns(ws, thread_id, timer) == 0
        await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=announcement, action_id=CANCEL,
                                            value=cancel["value"]))
        await ws.settle()
        assert any(f"cancelled already, by <@{by}>" in t for t in slack.ephemeral_texts("UREQ"))  # who, not a guess
        assert (await ws.store.stats(3600)).get("followup_cancelled") == 1
    finally:
        await ws.stop()


async def test_a_cancel_whose_worker_died_after_removing_the_timer_is_finished_by_the_next_press(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """The store removed the timer for UREQ's Cancel and the worker died before recording or saying it: pressed
    again, the cancel is said (who, in the announcement, in the thread's record, counted) — not "no longer pending
    (it ran, or was cancelled)" under an announcement that stays "scheduled" with a live Cancel for good."""
    ws = await open_at(redis_url, prefix, slack, Clock())
    try:
        thread_id = await asked(ws)
        timer = await schedule(ws, thread_id)
        announcement = copy.deepcopy(slack.thread(CHANNEL, "500.1")[-1])
        assert await ws.store.timers.cancel(timer.id, unless_firing=True, by="UREQ") is not None  # then it died
        await ws.sender.action(block_action(user="UMATE", channel=CHANNEL, message=announcement, action_id=CANCEL,
                                            value=timer.id))
        await ws.settle()
        assert any("cancelled already, by <@UREQ>" in t for t in slack.ephemeral_texts("UMATE"))
        shown = slack.messages[(CHANNEL, announcement["ts"])]
        assert "cancelled by <@UREQ>" in all_text(shown) and buttons(shown) == []
        events = [e.kind for e in await followup_events(ws.service.timers.slack.meta, CHANNEL, "500.1")
                  if e.timer_id == timer.id]
        assert events == ["scheduled", "cancelled"]
        assert (await ws.store.stats(3600)).get("followup_cancelled") == 1
    finally:
        await ws.stop()


async def test_app_home_lists_your_follow_ups_with_cancel(ws: Workspace) -> None:
    ws.slack.private.add(CHANNEL)  # a private channel: UOUT is not in it
    ws.slack.members[CHANNEL] = {"UREQ", "UAPPROVER"}
    thread_id = await asked(ws)
    timer = await schedule(ws, thread_id)
    other = await schedule(ws, thread_id, minutes=30)  # two: one Home view, two Cancel buttons
    assert ws.service.inbound.home is not None
    blocks = await ws.service.inbound.home.blocks("UREQ")
    at = next(i for i, b in enumerate(blocks) if "Your follow-ups and schedules" in str(b))
    line = blocks[at + 1]
    assert "is payments holding?" in line["text"]["text"] and line["accessory"]["value"] == timer.id
    assert blocks[at + 2]["accessory"]["value"] == other.id
    assert "Nothing scheduled" in str(await ws.service.inbound.home.blocks("UOTHER"))
    await ws.sender.event({"type": "app_home_opened", "user": "UREQ", "channel": "D0HOME", "tab": "home",
                           "event_ts": f"{time.time():.6f}"})
    await ws.settle()
    assert "is payments holding?" in json.dumps(ws.slack.homes["UREQ"])  # Slack took the view: ids unique

    def home_click(user: str, timer_id: str) -> dict[str, Any]:
        click = block_action(user=user, channel="", message={"ts": "1.1"}, action_id=line["accessory"]["action_id"],
                             value=timer_id)
        click.pop("channel")
        click["container"] = {"type": "view", "view_id": "V1"}
        click["view"] = {"id": "V1", "type": "home"}
        return click

    # UOUT cannot read the channel: its follow-up's id, seen elsewhere, cancels nothing, and nothing about it is
    # said (no ephemeral in a channel UOUT cannot read).
    await ws.sender.action(home_click("UOUT", timer.id))
    await ws.settle()
    assert await ws.store.timers.get(timer.id) is not None and ws.slack.ephemeral_texts("UOUT") == []
    await ws.sender.action(home_click("UREQ", timer.id))  # a member: cancelled
    await ws.settle()
    assert await ws.store.timers.get(timer.id) is None and await ws.store.timers.get(other.id) is not None


async def test_a_re_check_after_a_restart_outlives_opspilot_and_compares_with_before(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    clock = Clock()
    ws = await open_at(redis_url, prefix, slack, clock)
    thread_id = thread_key(CHANNEL, "700.1")
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", QUESTION, "700.1"))
        await ws.settle()
        await ws.sender.event(message(CHANNEL, "UREQ", "restart it in prod", "700.2", thread_ts="700.1"))
        await ws.settle()
        card = next(m for m in slack.thread(CHANNEL, "700.1")
                    if any(b["action_id"] == "opspilot_confirm" for b in buttons(m)))
        token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
        await ws.sender.action(block_action(user="UAPPROVER", channel=CHANNEL, message=copy.deepcopy(card),
                                            action_id="opspilot_confirm", value=token))
        await ws.settle()
        assert len(ws.toolbox.restarts.done) == 1
        answer = next(m for m in reversed(slack.thread(CHANNEL, "700.1"))
                      if any(b["action_id"] == RECHECK for b in buttons(m)))  # it reports a change
        run_id = next(b["value"] for b in buttons(answer) if b["action_id"] == RECHECK)
        press = block_action(user="UREQ", channel=CHANNEL, message=copy.deepcopy(answer), action_id=RECHECK,
                             value=run_id)
        await ws.sender.action(press)
        await ws.sender.action(press)  # pressed twice: one re-check
        await ws.settle()
        [timer] = await ws.store.timers.pending(thread_id)
        assert timer.due == int(clock.now) + 600 and timer.source == "button"
        assert any("already scheduled" in t for t in slack.ephemeral_texts("UREQ"))
        # A question that names no restart gets no button: nothing changed.
        first_answer = next(m for m in slack.thread(CHANNEL, "700.1") if "Runbook advice" in all_text(m))
        assert not any(b["action_id"] == RECHECK for b in buttons(first_answer))
    finally:
        await ws.stop()  # OpsPilot goes down with the follow-up pending

    clock.now = timer.due + 30
    again = await open_at(redis_url, prefix, slack, clock)  # a new process, the same Redis
    try:
        assert await tick(again) == 1
        await again.settle()
        assert await turns(again, thread_id, timer) == 1
        turn = [m for m in await again.store.load_transcript(thread_id) if isinstance(m, UserMessage)][-1]
        assert "Follow-up requested by <@UREQ>" in turn.content and "Is it holding after the change" in turn.content
        text = all_text(slack.thread(CHANNEL, "700.1")[-1])
        # The demo's restart lived in the process that went down, so the rate is back where it was before it:
        # now is compared with the figure from before the restart, and the verdict follows from those two numbers.
        assert "Follow-up on payments (prod)*: error rate now 4.3%" in text
        assert "Before the restart: 4.3% (`restart_service`)" in text and "Right after the restart: 0.30%" in text
        assert text.endswith("The same as before the restart: 4.3% → 4.3%.")
    finally:
        await again.stop()


async def restarted(ws: Workspace, thread: str, *, confirm: bool = True) -> dict:
    """A question, "restart it in prod" and the card confirmed (or declined): the last answer in the thread."""
    await ws.sender.event(mention(CHANNEL, "UREQ", QUESTION, thread))
    await ws.settle()
    await ws.sender.event(message(CHANNEL, "UREQ", "restart it in prod", f"{thread}2", thread_ts=thread))
    await ws.settle()
    card = next(m for m in ws.slack.thread(CHANNEL, thread)
                if any(b["action_id"] == "opspilot_confirm" for b in buttons(m)))
    action = "opspilot_confirm" if confirm else "opspilot_decline"
    token = next(b["value"] for b in buttons(card) if b["action_id"] == action)
    await ws.sender.action(block_action(user="UAPPROVER", channel=CHANNEL, message=copy.deepcopy(card),
                                        action_id=action, value=token))
    await ws.settle()
    return ws.slack.thread(CHANNEL, thread)[-1]


def announcements(ws: Workspace, thread: str) -> list[dict]:
    return [m for m in ws.slack.thread(CHANNEL, thread) if "Follow-up at" in all_text(m) or "Follow-up ran" in
            all_text(m)]


async def test_a_re_check_pressed_after_the_first_ran_is_a_new_follow_up_and_the_ran_line_stays(ws: Workspace) -> None:
    answer = await restarted(ws, "720.1")
    run_id = next(b["value"] for b in buttons(answer) if b["action_id"] == RECHECK)
    press = block_action(user="UREQ", channel=CHANNEL, message=copy.deepcopy(answer), action_id=RECHECK,
                         value=run_id)
    await ws.sender.action(press)
    await ws.settle()
    thread_id = thread_key(CHANNEL, "720.1")
    [first] = await ws.store.timers.pending(thread_id)
    clock_of(ws).now = first.due + 1
    assert await tick(ws) == 1
    await ws.settle()
    [ran] = announcements(ws, "720.1")
    assert "Follow-up ran at" in all_text(ran) and buttons(ran) == []

    await ws.sender.action(press)  # the same button, once the first re-check ran
    await ws.settle()
    [second] = await ws.store.timers.pending(thread_id)
    assert second.id != first.id and second.due == int(clock_of(ws).now) + 600
    old, new = announcements(ws, "720.1")
    assert old["ts"] == ran["ts"] and "Follow-up ran at" in all_text(old)  # the record that it ran is kept
    assert "Follow-up at" in all_text(new) and [b["action_id"] for b in buttons(new)] == [CANCEL]
    await ws.sender.action(press)  # again while the second is pending: the same one, and a private word says so
    await ws.settle()
    assert [t.id for t in await ws.store.timers.pending(thread_id)] == [second.id]
    assert "already scheduled" in ws.slack.ephemeral_texts("UREQ")[-1]
    assert len(announcements(ws, "720.1")) == 2


def test_only_a_change_that_ran_is_worth_a_re_check() -> None:
    def entry(status: str, code: str = "") -> dict[str, str]:
        return {"tool": "restart_service", "status": status, "error_code": code}

    assert ran_a_change([entry("ok")]) and ran_a_change([entry("error", "outcome_unknown")])
    assert ran_a_change([entry("error", "declined_by_user"), entry("ok")])
    for status, code in [("error", "declined_by_user"), ("error", "user_replied_instead"), ("error", "expired"),
                         ("cancelled", ""), ("error", "restart_failed")]:
        assert not ran_a_change([entry(status, code)]), (status, code)
    assert not ran_a_change([])


async def test_no_re_check_under_an_answer_whose_change_did_not_run(ws: Workspace) -> None:
    answer = await restarted(ws, "730.1", confirm=False)  # declined
    assert "declined: not run" in all_text(answer) and ws.toolbox.restarts.done == []
    assert not any(b["action_id"] == RECHECK for b in buttons(answer))

    await ws.sender.event(mention(CHANNEL, "UREQ", QUESTION, "740.1"))  # answered in the thread instead
    await ws.settle()
    await ws.sender.event(message(CHANNEL, "UREQ", "restart it in prod", "740.2", thread_ts="740.1"))
    await ws.settle()
    await ws.sender.event(message(CHANNEL, "UREQ", "wait, check the database first", "740.3", thread_ts="740.1"))
    await ws.settle()
    listed = [m for m in ws.slack.thread(CHANNEL, "740.1") if "answered in the thread instead" in all_text(m)]
    assert listed and not any(b["action_id"] == RECHECK for m in listed for b in buttons(m))

    # A button under such an answer (posted before this rule) schedules nothing, and says why.
    run_id = str(await ws.store.thread_run(thread_key(CHANNEL, "730.1")))  # the run that was declined
    await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=copy.deepcopy(answer),
                                        action_id=RECHECK, value=run_id))
    await ws.settle()
    assert await ws.store.timers.pending(thread_key(CHANNEL, "730.1")) == []
    assert "that answer changed nothing" in ws.slack.ephemeral_texts("UREQ")[-1]


async def test_a_handover_lists_the_channels_pending_follow_ups(ws: Workspace) -> None:
    """Every one still to come, whenever asked for: one set up 3 h ago, due in the next hour, was left out of a
    2-hour handover ("No follow-ups are scheduled")."""
    clock_of(ws).now = time.time() - 3 * 3600
    ws.slack.post_as_user(CHANNEL, "UREQ", QUESTION, ts="500.1")  # so that Slack has a permalink for it
    thread_id = await asked(ws)
    await schedule(ws, thread_id, minutes=240)
    clock_of(ws).now = time.time()  # a handover looks back from now
    await ws.sender.command({"command": "/opspilot", "text": "handover 2", "user_id": "UREQ", "channel_id": CHANNEL,
                             "trigger_id": "handover-1", "response_url": "https://hooks.slack.test/commands/1"})
    await ws.settle()
    posted = next(m for (c, _), m in ws.slack.messages.items() if c == CHANNEL and "Handover" in all_text(m))
    text = all_text(posted)
    assert "Scheduled follow-ups" in text and "asked by <@UREQ>: is payments holding?" in text
    assert f"<https://fake.slack.test/archives/{CHANNEL}/p5001|open the thread>" in text  # Slack's own link
    assert "slack.com/archives" not in text


async def test_a_chinese_handover_and_home_say_follow_ups_in_chinese_with_slacks_links(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    clock = Clock(time.time())
    ws = await open_at(redis_url, prefix, slack, clock, language="zh")
    try:
        slack.post_as_user(CHANNEL, "UREQ", QUESTION, ts="500.1")
        thread_id = await asked(ws)
        timer, _ = await ws.service.core.followups.schedule(  # type: ignore[union-attr]
            thread_id=thread_id, owner="UREQ", after_minutes=10, question="支付还稳定吗？<@UOTHER> 也看一下",
            source="model")
        await ws.settle()
        await ws.sender.command({"command": "/opspilot", "text": "handover", "user_id": "UREQ",
                                 "channel_id": CHANNEL, "trigger_id": "handover-zh",
                                 "response_url": "https://hooks.slack.test/commands/1"})
        await ws.settle()
        text = all_text(next(m for (c, _), m in slack.messages.items() if c == CHANNEL and "交接" in all_text(m)))
        line = next(x for x in text.splitlines() if "支付还稳定吗" in x)
        assert "<@UREQ> 请求：支付还稳定吗？&lt;@UOTHER&gt; 也看一下" in line  # as written, escaped once
        assert line.endswith(f"<https://fake.slack.test/archives/{CHANNEL}/p5001|打开对话>"), line
        assert english_runs(line) == [], line
        assert ws.service.inbound.home is not None
        [listed] = [b["text"]["text"] for b in await ws.service.inbound.home.blocks("UREQ")
                    if b.get("accessory", {}).get("value") == timer.id]
        day = ("周一", "周二", "周三", "周四", "周五", "周六", "周日")[time.gmtime(timer.due).tm_wday]
        assert listed.startswith(f"• {day} ") and english_runs(listed) == [], listed
        assert f"在<https://fake.slack.test/archives/{CHANNEL}/p5001|对话>中跟进" in listed
    finally:
        await ws.stop()


async def test_the_slack_service_offers_the_model_a_read_only_follow_up_tool(redis_url: str, prefix: str) -> None:
    from bot.assembly import assemble
    from bot.config import Settings

    core = await assemble(Settings(redis_url=redis_url, key_prefix=prefix), fallback_store=False, with_followups=True)
    try:
        spec = core.engine.deps.registry.get("schedule_followup")
        assert spec is not None and not spec.mutating
        schema = spec.definition().input_schema["properties"]["after_minutes"]
        assert (schema["minimum"], schema["maximum"]) == (1, 240)
        plain = await assemble(Settings(redis_url=redis_url, key_prefix=prefix), fallback_store=False)
        assert plain.engine.deps.registry.get("schedule_followup") is None  # the terminal chat has no threads
        await plain.store.close()
    finally:
        await core.store.close()


async def test_a_follow_up_that_carries_on_a_paused_run_changes_nothing_unconfirmed(redis_url: str, prefix: str,
                                                                                     slack: FakeSlack) -> None:
    """A follow-up's turn (nobody asked: unattended) reaching a run paused on a card carried it on as the person's:
    the change the model asked for next, in staging, ran with no card."""
    probe = Probe()
    model = ScriptedModel([reply("", call("change", "c1", target="payments", environment="prod")),
                           reply("", call("change", "c2", target="payments", environment="staging")),
                           reply("Done.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[toolkit(probe)["change"]])
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "change payments in prod", "460.1"))
        await ws.settle()
        await ws.service.core.engine.ask(thread_key(CHANNEL, "460.1"), "Follow-up: is it better?", user_id="UREQ",
                                         request_id="fu-460", unattended=True)
        await ws.settle()
        assert probe.count("change") == 0
    finally:
        await ws.stop()


async def test_a_follow_up_whose_announcement_was_lost_is_announced_when_asked_again(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """The announcement failed once (a Redis blip, the process dying after the timer was kept): the follow-up stayed
    scheduled with no announcement and no Cancel, and asking again said "already scheduled" to a thread showing
    nothing."""
    ws = await open_at(redis_url, prefix, slack, Clock(time.time()))
    try:
        slack.post_as_user(CHANNEL, "UREQ", QUESTION, ts="520.1")
        thread_id = await asked(ws, "520.1")
        followups = ws.service.core.followups
        assert followups is not None
        announce = followups.listeners[0]
        failed: list[str] = []

        async def blip(timer: Any) -> None:
            if not failed:
                failed.append(timer.id)
                raise ConnectionError("Redis went away mid-announcement")
            await announce(timer)

        followups.listeners[0] = blip
        ask = {"thread_id": thread_id, "owner": "UREQ", "after_minutes": 10, "question": "still fine?",
               "source": "button", "key": "recheck:r1"}
        assert (await followups.schedule(**ask))[1]  # kept; its announcement lost
        await ws.settle()
        assert not [m for m in slack.thread(CHANNEL, "520.1") if any(b["action_id"].startswith(CANCEL)
                                                                    for b in buttons(m))]
        assert not (await followups.schedule(**ask))[1]  # the same one, asked again: announced now
        await ws.settle()
        shown = [m for m in slack.thread(CHANNEL, "520.1") if any(b["action_id"].startswith(CANCEL)
                                                                  for b in buttons(m))]
        assert len(shown) == 1, [all_text(m) for m in slack.thread(CHANNEL, "520.1")]
        events = await followup_events(ws.service.core.meta, CHANNEL, "520.1")
        assert [e.kind for e in events] == ["scheduled"]
    finally:
        await ws.stop()


async def test_an_ask_racing_the_firing_does_not_show_a_ran_follow_up_as_scheduled(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """Asked again (a second Re-check press) just as it fell due: it was announced again after it ran, "at <a new
    time>" with a Cancel, for a follow-up that will never run again."""
    clock = Clock(time.time())
    ws = await open_at(redis_url, prefix, slack, clock)
    try:
        thread_id = await asked(ws, "540.1")
        followups = ws.service.core.followups
        assert followups is not None
        ask = {"thread_id": thread_id, "owner": "UREQ", "after_minutes": 10, "question": "still fine?",
               "source": "button", "key": "recheck:r2"}
        timer, _ = await followups.schedule(**ask)
        await ws.settle()
        add = followups.timers.add

        async def add_then_fire(t: Any, **kw: Any) -> Any:  # the repeat finds it; then it falls due and runs
            answer = await add(t, **kw)
            clock.now = timer.due
            assert await tick(ws) == 1
            await ws.settle()
            return answer

        followups.timers.add = add_then_fire  # type: ignore[method-assign]
        clock.now = timer.created_at + 5
        await followups.schedule(**ask)
        followups.timers.add = add  # type: ignore[method-assign]
        await ws.settle()
        assert await followups.timers.get(timer.id) is None
        assert not [m for m in slack.thread(CHANNEL, "540.1") if any(b["action_id"].startswith(CANCEL)
                                                                    for b in buttons(m))]
    finally:
        await ws.stop()
