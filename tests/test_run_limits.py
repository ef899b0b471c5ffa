"""Limits for every door (issue 34): a sliding window per person and one per channel for each way a run starts,
through the signed Slack endpoint; refusals say when to try again (to the person only, once per hold and
conversation) and are counted in ``/metrics`` and the stats; schedules' minimum interval and per-person cap;
follow-ups' per-person cap; an alert's run in its channel's window; one window on a Redis Cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from bot.agent.models.scripted import ScriptedModel, call, reply
from bot.demo.sender import block_action, mention, message
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import buttons
from bot.followup_tool import followup_tool
from bot.run_limits import UNLIMITED, RunLimits
from bot.slack.outbound.thread_meta import thread_key
from tests.slack_harness import CHANNEL, Workspace, ask_restart, open_workspace
from tests.test_alerts import ALERTS, fire, notification, source
from tests.test_followups import results
from tests.test_timers import Clock, open_at

RETRY = "try again after"


def limits(**on: int) -> RunLimits:
    return UNLIMITED.model_copy(update=on)


async def command(ws: Workspace, text: str, channel: str = CHANNEL, user: str = "UREQ") -> None:
    await ws.sender.command({"command": "/opspilot", "text": text, "user_id": user, "channel_id": channel,
                             "trigger_id": f"trig-{channel}-{user}-{len(ws.slack.calls)}",
                             "response_url": "https://hooks.slack.test/commands/1"})
    await ws.settle()


async def shortcut(ws: Workspace, channel: str, user: str = "UREQ") -> None:
    posted = ws.slack.post_as_user(channel, "UALICE", "orders-api is throwing 500s since 10:02")
    await ws.sender.action({"type": "message_action", "callback_id": "opspilot_investigate_message",
                            "trigger_id": f"sc-{posted['ts']}", "team": {"id": "T0001"}, "user": {"id": user},
                            "channel": {"id": channel}, "message": {k: posted[k] for k in ("ts", "text", "user")},
                            "response_url": "https://x.test/r"})
    await ws.settle()


def told(ws: Workspace, user: str, channel: str | None = None) -> list[str]:
    return [e["text"] for e in ws.slack.ephemerals
            if e["user"] == user and RETRY in e["text"] and (channel is None or e["channel"] == channel)]


async def metrics(ws: Workspace) -> str:
    async with aiohttp.ClientSession() as session, session.get(f"{ws.server.url}/metrics") as answer:
        return await answer.text()


@pytest.fixture
async def person(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[Workspace]:
    workspace = await open_workspace(redis_url, prefix, slack, run_limits=limits(per_person=2, per_person_window_s=600))
    yield workspace
    await workspace.stop()


async def test_a_full_personal_window_refuses_every_door_and_says_when_to_try_again(person: Workspace) -> None:
    ws = person
    await ws.sender.event(mention(CHANNEL, "UREQ", "payments errors?", "100.1"))
    await ws.sender.event(mention(CHANNEL, "UREQ", "orders errors?", "100.2"))
    await ws.settle()
    assert (await ws.store.stats(3600)).runs == 2
    await ws.sender.event(mention(CHANNEL, "UREQ", "checkout errors?", "100.3"))
    await ws.settle()
    await ws.sender.event(mention(CHANNEL, "UREQ", "and now?", "100.4"))  # the same hold, the same place: silent
    await ws.settle()
    [first] = told(ws, "UREQ", CHANNEL)
    assert "2 runs in the last 10 min" in first and "UTC (in " in first, first
    await ws.sender.event(message("D0REQ", "UREQ", "payments errors?", "100.5", channel_type="im"))
    await ws.settle()
    await command(ws, "orders errors?", channel="C0OTHER")
    await shortcut(ws, "C0THIRD")
    assert (await ws.store.stats(3600)).runs == 2  # nothing else started
    for where in ("D0REQ", "C0OTHER", "C0THIRD"):
        assert len(told(ws, "UREQ", where)) == 1, where
    assert not any(m.get("thread_ts") is None and "orders errors" in str(m.get("text"))
                   for (c, _), m in ws.slack.messages.items() if c == "C0OTHER")  # no thread started for it
    text = await metrics(ws)
    for door, n in (("mention", 2), ("dm", 1), ("command", 1), ("shortcut", 1)):
        assert f'opspilot_runs_refused_total{{door="{door}",scope="person"}} {n}' in text, (door, text)
    assert (await ws.store.stats(3600)).get("refused_person") == 5
    await ws.sender.event(mention(CHANNEL, "UOTHER", "payments errors?", "100.6"))  # someone else: their own
    await ws.settle()
    assert (await ws.store.stats(3600)).runs == 3


async def test_a_full_channel_window_refuses_everyone_there_in_their_language(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    ws = await open_workspace(redis_url, prefix, slack, language="auto",
                              run_limits=limits(per_channel=2, per_channel_window_s=60))
    try:
        await ws.sender.event(mention(CHANNEL, "UA", "payments errors?", "200.1"))
        await ws.sender.event(mention(CHANNEL, "UB", "orders errors?", "200.2"))
        await ws.settle()
        await ws.sender.event(mention(CHANNEL, "UC", "支付服务有错误吗？", "200.3"))
        await ws.sender.event(mention(CHANNEL, "UD", "checkout errors?", "200.4"))
        await ws.settle()
        assert (await ws.store.stats(3600)).runs == 2
        [zh] = [e["text"] for e in ws.slack.ephemerals if e["user"] == "UC"]
        assert "这个对话在 60 秒 内已发起 2 次运行" in zh and "之后再试" in zh, zh
        [en] = told(ws, "UD")
        assert "2 runs started in this conversation in the last 60 s" in en
        await ws.sender.event(mention("C0OTHER", "UC", "payments errors?", "200.5"))  # another channel: its own
        await ws.settle()
        assert (await ws.store.stats(3600)).runs == 3
        assert 'opspilot_runs_refused_total{door="mention",scope="channel"} 2' in await metrics(ws)
        assert (await ws.store.stats(3600)).get("refused_channel") == 2
    finally:
        await ws.stop()


async def test_a_schedule_every_minute_is_refused_with_the_reason(redis_url: str, prefix: str,
                                                                  slack: FakeSlack) -> None:
    ws = await open_at(redis_url, prefix, slack, Clock(), run_limits=limits(schedule_min_interval_s=900))
    try:
        await command(ws, 'schedule "* * * * *" UTC payments errors')
        await command(ws, 'schedule "0,5 * * * *" UTC payments errors')  # 5 min apart once an hour
        refusals = ws.slack.ephemeral_texts("UREQ")
        assert any("`* * * * *` fires every 60 s" in t and "at most once every 15 min" in t for t in refusals), \
            refusals
        assert any("`0,5 * * * *` fires every 5 min" in t for t in refusals), refusals
        await command(ws, 'schedule "*/15 * * * *" UTC payments errors')
        assert [t.cron for t in await ws.store.timers.every() if t.kind == "schedule"] == ["*/15 * * * *"]
    finally:
        await ws.stop()


async def test_a_person_s_schedules_are_capped_across_channels_and_dms(redis_url: str, prefix: str,
                                                                       slack: FakeSlack) -> None:
    ws = await open_at(redis_url, prefix, slack, Clock(), run_limits=limits(schedules_per_person=2))
    try:
        await command(ws, 'schedule "0 9 * * *" UTC payments errors', channel=CHANNEL)
        await command(ws, 'schedule "0 9 * * *" UTC orders errors', channel="C0OTHER")
        await command(ws, 'schedule "0 9 * * *" UTC checkout errors', channel="D0REQ")
        await command(ws, 'schedule "0 9 * * *" UTC checkout errors', channel="C0THIRD")
        kept = [t for t in await ws.store.timers.every() if t.kind == "schedule"]
        assert sorted(t.channel for t in kept) == sorted([CHANNEL, "C0OTHER"])
        refusals = [e for e in ws.slack.ephemerals if "across channels and DMs" in e["text"]]
        assert {e["channel"] for e in refusals} == {"D0REQ", "C0THIRD"}
        await command(ws, 'schedule "0 9 * * *" UTC checkout errors', channel="D0OTHER", user="UOTHER")
        assert len([t for t in await ws.store.timers.every() if t.kind == "schedule"]) == 3
    finally:
        await ws.stop()


async def test_a_person_s_schedules_made_at_once_are_capped_too(redis_url: str, prefix: str,
                                                                 slack: FakeSlack) -> None:
    """Eight commands at once in four channels each counted the person's schedules before any was added: all
    eight were kept under a cap of two."""
    import asyncio

    ws = await open_at(redis_url, prefix, slack, Clock(), run_limits=limits(schedules_per_person=2))
    try:
        await asyncio.gather(*(ws.sender.command({
            "command": "/opspilot", "text": f'schedule "0 9 * * *" UTC payments errors {i}', "user_id": "UREQ",
            "channel_id": channel, "trigger_id": f"trig-at-once-{i}", "response_url": "https://x.test/r"})
            for i, channel in enumerate([CHANNEL, "C0OTHER", "C0THIRD", "D0REQ"] * 2)))
        await ws.settle()
        kept = [t for t in await ws.store.timers.every() if t.kind == "schedule" and t.owner == "UREQ"]
        assert len(kept) == 2
    finally:
        await ws.stop()


def _sched(minutes: int) -> Any:
    return call("schedule_followup", after_minutes=minutes, question="is payments holding?")


async def _scheduling(redis_url: str, prefix: str, slack: FakeSlack, steps: list[Any]) -> Workspace:
    """A workspace whose model schedules follow-ups (``steps``), at most 2 pending per person."""
    ws = await open_at(redis_url, prefix, slack, Clock(), model=ScriptedModel(steps), specs=[],
                       run_limits=limits(followups_per_person=2))
    assert ws.service.core.followups is not None
    ws.service.core.engine.deps.registry.add(followup_tool(ws.service.core.followups))
    return ws


async def test_a_person_s_follow_ups_are_capped_across_threads(redis_url: str, prefix: str,
                                                               slack: FakeSlack) -> None:
    ws = await _scheduling(redis_url, prefix, slack, [reply("", _sched(10), _sched(20)), reply("Two re-checks."),
                                                      reply("", _sched(30)), reply("Noted.")])
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "re-check payments twice", "300.1"))
        await ws.settle()
        await ws.sender.event(mention("C0OTHER", "UREQ", "re-check payments too", "300.2"))
        await ws.settle()
        [refused] = results(await ws.store.load_transcript(thread_key("C0OTHER", "300.2")))
        assert refused["errorCode"] == "too_many_followups_for_person", refused
        assert "at most 2 are allowed per person" in refused["message"]
        assert not await ws.store.timers.pending(thread_key("C0OTHER", "300.2"))
    finally:
        await ws.stop()


async def test_a_person_s_follow_ups_asked_at_once_are_capped_too(redis_url: str, prefix: str,
                                                                   slack: FakeSlack) -> None:
    """Three follow-ups asked in one batch (read-only calls run at once) each counted none pending before any was
    kept: all three were kept under a cap of two."""
    ws = await _scheduling(redis_url, prefix, slack, [reply("", _sched(10), _sched(20), _sched(30)),
                                                      reply("Re-checks.")])
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "re-check payments three times", "301.1"))
        await ws.settle()
        kept = [t for t in await ws.store.timers.every() if t.kind == "followup" and t.owner == "UREQ"]
        codes = [r.get("errorCode") for r in results(await ws.store.load_transcript(thread_key(CHANNEL, "301.1")))]
        assert len(kept) == 2 and codes.count("too_many_followups_for_person") == 1, codes
    finally:
        await ws.stop()


async def test_a_personal_window_on_a_redis_cluster(cluster_url: str, prefix: str, slack: FakeSlack) -> None:
    ws = await open_workspace(cluster_url, prefix, slack, run_limits=limits(per_person=1, per_person_window_s=600))
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "payments errors?", "400.1"))
        await ws.settle()
        await ws.sender.event(mention(CHANNEL, "UREQ", "orders errors?", "400.2"))
        await ws.settle()
        assert (await ws.store.stats(3600)).runs == 1
        assert len(told(ws, "UREQ", CHANNEL)) == 1
    finally:
        await ws.stop()


async def test_an_alert_run_counts_in_its_channel_s_window_and_is_offered_when_it_is_full(
        redis_url: str, prefix: str, slack: FakeSlack) -> None:
    ws = await open_workspace(redis_url, prefix, slack, alert_sources=[source()],
                              run_limits=limits(per_channel=1, per_channel_window_s=600))
    slack.deliver = ws.sender.event
    try:
        await ws.sender.event(mention(ALERTS, "UREQ", "payments errors?", "500.1"))
        await ws.settle()
        alert_ts = await fire(slack, slack.add_webhook(ALERTS), notification("firing"))
        await ws.settle()
        assert (await ws.store.stats(3600)).runs == 1
        offer = slack.thread(ALERTS, alert_ts)[-1]
        assert "many runs started in this channel just now" in str(offer.get("text")), offer
        assert 'opspilot_runs_refused_total{door="alert",scope="channel"} 1' in await metrics(ws)
    finally:
        await ws.stop()


async def test_an_incident_summary_counts_in_the_window_like_a_run(person: Workspace) -> None:
    """A summary is a model call as a run is: with the person's window full, "@OpsPilot summarize" and
    `/opspilot summary` write no canvas and say when to try again."""
    ws = person
    for ts in ("300.1", "300.2"):
        await ws.sender.event(mention(CHANNEL, "UREQ", "payments errors?", ts))
    await ws.settle()
    await ws.sender.event(mention(CHANNEL, "UREQ", "summarize", "300.19", thread_ts="300.1"))
    await ws.settle()
    await command(ws, "summary 300.1", channel=CHANNEL)
    assert ws.slack.called("canvases.create") == [] and ws.slack.called("files.completeUploadExternal") == []
    assert len(told(ws, "UREQ", CHANNEL)) >= 1
    assert 'opspilot_runs_refused_total{door="summarize",scope="person"} 2' in await metrics(ws)


async def test_each_summary_command_counts_even_within_one_minute(person: Workspace) -> None:
    """`/opspilot summary` asked again and again for one thread: each is a model call and a canvas written, so
    each counts (they were one start per person, thread and minute: four canvases, one counted)."""
    ws = person
    await ws.sender.event(mention(CHANNEL, "UREQ", "payments errors?", "310.1"))
    await ws.settle()  # one run: one slot of two left
    for _ in range(3):
        await command(ws, "summary 310.1", channel=CHANNEL)
    written = len(ws.slack.called("canvases.create")) + len(ws.slack.called("canvases.edit"))
    assert written == 1 and len(told(ws, "UREQ", CHANNEL)) >= 1
    assert 'opspilot_runs_refused_total{door="summarize",scope="person"} 2' in await metrics(ws)


async def test_a_start_the_channel_refuses_gives_the_person_s_slot_back(redis_url: str, prefix: str,
                                                                        slack: FakeSlack) -> None:
    """A person's window is counted first: refused by the channel's, the start is given back to theirs, so they
    are not told later that they started two runs (and when to try again) having run one."""
    clock = [1_000_000.0]
    ws = await open_workspace(redis_url, prefix, slack, run_limits=limits(
        per_person=2, per_person_window_s=600, per_channel=1, per_channel_window_s=5))
    ws.service.inbound.gate.clock = lambda: clock[0]
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "payments errors?", "320.1"))
        await ws.settle()
        await ws.sender.event(mention(CHANNEL, "UREQ", "orders errors?", "320.2"))  # the channel's window is full
        await ws.settle()
        assert [t for t in told(ws, "UREQ") if "1 run started in this conversation in the last 5 s" in t]
        clock[0] += 6  # the channel's window is free again; the person has started one run of two
        await ws.sender.event(mention(CHANNEL, "UREQ", "gateway errors?", "320.3"))
        await ws.settle()
        assert (await ws.store.stats(3600)).runs == 2
        assert not [t for t in told(ws, "UREQ") if "You have started" in t]
    finally:
        await ws.stop()


async def test_a_dm_between_people_is_not_opspilot_s_dm(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """``allowed_channels`` spares only OpsPilot's own DMs: a command or shortcut in a DM between two people
    (OpsPilot not in it) started a run there, or kept a schedule for it, as if it were OpsPilot's DM."""
    slack.members["D0AM"] = {"UALICE", "UMAL"}
    ws = await open_at(redis_url, prefix, slack, Clock(), allowed_channels=[CHANNEL])
    try:
        await shortcut(ws, "D0AM", user="UMAL")
        for text in ('schedule "0 9 * * *" UTC payments errors', "payments errors"):
            await ws.sender.command({"command": "/opspilot", "text": text, "user_id": "UMAL", "channel_id": "D0AM",
                                     "trigger_id": f"trig-{text}", "response_url": slack.response_url()})
            await ws.settle()
        assert (await ws.store.stats(3600)).runs == 0
        assert [t for t in await ws.store.timers.every() if t.kind == "schedule"] == []
        said = [str(r.get("text")) for r in slack.responses]  # through the commands' URLs: OpsPilot is not there
        assert len(said) == 2 and all("I am not in this conversation" in t for t in said), said
        await command(ws, "payments errors", channel="D0REQ")  # OpsPilot's own DM: allowed
        assert (await ws.store.stats(3600)).runs == 1
    finally:
        await ws.stop()


async def test_a_start_that_starts_nothing_takes_no_slot(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """Investigate pressed under an alert someone else took already ("I am already on it"), a summary of a thread
    with no records: nothing started, yet each took a slot, and the person was then refused — "you have started 2
    runs" — having started none."""
    ws = await open_workspace(redis_url, prefix, slack, alert_sources=[source(mode="button")],
                              run_limits=limits(per_person=2, per_person_window_s=600))
    slack.deliver = ws.sender.event
    try:
        alert_ts = await fire(slack, slack.add_webhook(ALERTS), notification("firing"))
        await ws.settle()
        offer = next(m for m in slack.thread(ALERTS, alert_ts) if buttons(m))
        for user in ("UOTHER", "UREQ", "UREQ"):
            await ws.sender.action(block_action(user=user, channel=ALERTS, message=offer,
                                                action_id="opspilot_investigate", value=alert_ts))
            await ws.settle()
        await command(ws, "summary 123.456", channel=CHANNEL)  # OpsPilot holds no records of it
        for ts in ("330.1", "330.2"):
            await ws.sender.event(mention(CHANNEL, "UREQ", "payments errors?", ts))
            await ws.settle()
        assert (await ws.store.stats(3600)).runs == 3  # UOTHER's investigation and UREQ's two questions
        assert told(ws, "UREQ") == []
    finally:
        await ws.stop()


async def test_handovers_are_limited_like_runs(person: Workspace) -> None:
    """Fifty `/opspilot handover` from one person were fifty posts in the channel, each a scan of its threads."""
    ws = person
    for _ in range(4):
        await command(ws, "handover", channel=CHANNEL)
    posted = [m for (c, _), m in ws.slack.messages.items() if c == CHANNEL and "Handover" in str(m.get("text"))]
    assert len(posted) == 2, posted
    assert len(told(ws, "UREQ", CHANNEL)) == 1
    assert 'opspilot_runs_refused_total{door="handover",scope="person"} 2' in await metrics(ws)


async def test_a_question_its_thread_does_not_take_gives_its_slot_back(redis_url: str, prefix: str,
                                                                      slack: FakeSlack) -> None:
    """Replies in a thread whose card waits on someone else ("not taken up") started nothing: the person's next
    question is taken, not refused with "you have started 2 runs"."""
    ws = await open_workspace(redis_url, prefix, slack, run_limits=limits(per_person=2, per_person_window_s=600),
                              approvers={"restart_service": {"*": {"users": ["UAPPROVER"]}}})
    try:
        await ask_restart(ws, thread="500.1")  # UREQ's: a card waits on UAPPROVER
        for n in (1, 2):
            await ws.sender.event(message(CHANNEL, "UOTHER", f"what is going on? {n}", f"500.1{n}0",
                                          thread_ts="500.1"))
            await ws.settle()
        assert sum("not taken up" in e["text"] for e in slack.ephemerals if e["user"] == "UOTHER") == 2
        before = (await ws.store.stats(3600)).runs
        await ws.sender.event(mention(CHANNEL, "UOTHER", "payments errors?", "501.1"))
        await ws.settle()
        assert told(ws, "UOTHER") == []
        assert (await ws.store.stats(3600)).runs == before + 1
    finally:
        await ws.stop()


async def test_investigate_its_thread_does_not_take_leaves_the_offer(redis_url: str, prefix: str,
                                                                    slack: FakeSlack) -> None:
    """Investigate pressed while the alert's thread waits on someone else's card: nothing investigates, so the
    offer keeps its button and says nobody is on it, a later press is asked again (not "already on it"), and the
    presser's slot is given back."""
    ws = await open_workspace(redis_url, prefix, slack, alert_sources=[source(mode="button")],
                              approvers={"restart_service": {"*": {"users": ["UAPPROVER"]}}},
                              run_limits=limits(per_person=1, per_person_window_s=600))
    slack.deliver = ws.sender.event
    try:
        alert_ts = await fire(slack, slack.add_webhook(ALERTS), notification("firing"))
        await ws.settle()
        offer = next(m for m in slack.thread(ALERTS, alert_ts) if buttons(m))
        await ws.sender.event(mention(ALERTS, "UONCALL", "restart payments in prod", "900.5", thread_ts=alert_ts))
        await ws.settle()
        for _ in range(2):
            await ws.sender.action(block_action(user="UB", channel=ALERTS, message=offer,
                                                action_id="opspilot_investigate", value=alert_ts))
            await ws.settle()
        said = [e["text"] for e in slack.ephemerals if e["user"] == "UB"]
        assert len(said) == 2 and all("not taken up" in text for text in said)  # neither "already on it" nor limited
        thread = slack.thread(ALERTS, alert_ts)
        assert not any("Investigating, as" in str(m.get("text")) for m in thread)
        assert any(b["action_id"] == "opspilot_investigate" for m in thread for b in buttons(m))
    finally:
        await ws.stop()


async def test_a_refusal_under_a_chinese_alert_is_chinese(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """An offered alert has no thread record yet: the refusal speaks the alert's language, as its offer does."""
    head = "[FIRING:1] PaymentsHighErrorRate payments (prod critical)"
    chinese = {"username": "Alertmanager", "attachments": [{
        "title": head, "fallback": head, "color": "danger",
        "text": "*Labels:*\n• alertname: `PaymentsHighErrorRate`\n• service: `payments`\n• environment: `prod`\n"
                "*Annotations:*\n• summary: 支付服务五分钟内错误率超过百分之二，请尽快排查处理"}]}
    ws = await open_workspace(redis_url, prefix, slack, language="auto", alert_sources=[source(mode="button")],
                              run_limits=limits(per_person=1, per_person_window_s=600))
    slack.deliver = ws.sender.event
    try:
        await ws.sender.event(mention(CHANNEL, "UZH", "payments errors?", "610.1"))  # takes UZH's one slot
        await ws.settle()
        alert_ts = await fire(slack, slack.add_webhook(ALERTS), chinese)
        await ws.settle()
        offer = next(m for m in slack.thread(ALERTS, alert_ts) if buttons(m))
        await ws.sender.action(block_action(user="UZH", channel=ALERTS, message=offer,
                                            action_id="opspilot_investigate", value=alert_ts))
        await ws.settle()
        [refusal] = [e["text"] for e in slack.ephemerals if e["user"] == "UZH" and e["channel"] == ALERTS]
        assert "次运行" in refusal and "You have" not in refusal
    finally:
        await ws.stop()
