"""What a summary says of who asked and when, from the records: a question OpsPilot composed (the Investigate
shortcut's, an alert's) is never shown as the presser's words, and an investigation begins when its run began —
the press — not at the time of the message or alert it is about."""

from __future__ import annotations

import copy

from bot.demo.sender import block_action, mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import buttons
from bot.slack.incidents.incident import gather
from bot.slack.outbound.thread_meta import thread_key
from tests.slack_harness import CHANNEL, Workspace, open_workspace
from tests.test_alerts import ALERTS, fire, notification, source


async def _investigated(ws: Workspace) -> str:
    """An alert fired in button mode, and UONCALL pressed Investigate under it: its ts."""
    ts = await fire(ws.slack, ws.slack.add_webhook(ALERTS), notification("firing"))
    await ws.settle()
    [offer] = [m for m in ws.slack.thread(ALERTS, ts) if buttons(m)]
    await ws.sender.action(block_action(user="UONCALL", channel=ALERTS, message=copy.deepcopy(offer),
                                        action_id="opspilot_investigate", value=ts))
    await ws.settle()
    return ts


async def test_the_shortcut_s_question_is_not_shown_as_the_presser_s_words(redis_url: str, prefix: str,
                                                                          slack: FakeSlack) -> None:
    ws = await open_workspace(redis_url, prefix, slack)
    try:
        posted = slack.post_as_user(CHANNEL, "UALICE", "payments is throwing 500s since 10:02")
        await ws.sender.action({"type": "message_action", "callback_id": "opspilot_investigate_message",
                                "trigger_id": "sc-1", "team": {"id": "T0001"}, "user": {"id": "UREQ"},
                                "channel": {"id": CHANNEL}, "message": {k: posted[k] for k in ("ts", "text", "user")},
                                "response_url": slack.response_url(CHANNEL)})
        await ws.settle()
        await ws.sender.event(mention(CHANNEL, "UOTHER", "summarize", "9999.5", thread_ts=posted["ts"]))
        await ws.settle()
        canvas = next(iter(slack.canvases.values()))
        assert "quoted above" not in canvas["markdown"] and "<@UREQ>" not in canvas["markdown"]
        assert "quoted above" not in str(canvas.get("title"))
        assert "Investigation of a message started by" in canvas["markdown"]
    finally:
        await ws.stop()


async def test_an_investigation_begins_when_it_was_pressed_not_when_its_alert_fired(redis_url: str, prefix: str,
                                                                                   slack: FakeSlack) -> None:
    ws = await open_workspace(redis_url, prefix, slack, alert_sources=[source(mode="button")])
    slack.deliver = ws.sender.event
    try:
        ts = await _investigated(ws)
        run = await ws.store.load_run(await ws.store.thread_run(thread_key(ALERTS, ts)) or "")
        assert run is not None
        [asked] = (await gather(ws.store, ws.store.meta, ws.store, ALERTS, ts)).asked
        assert asked.automatic and asked.at == run.created_at != float(ts)
    finally:
        await ws.stop()


async def test_a_partial_resolution_is_not_called_fired_again(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """3 firing, then 1: the thread said "Partly resolved", the summary "Alert fired again (1 firing)"."""
    from bot.slack.incidents.document import render

    ws = await open_workspace(redis_url, prefix, slack, alert_sources=[source()])
    slack.deliver = ws.sender.event
    try:
        hook = slack.add_webhook(ALERTS)
        ts = await fire(slack, hook, notification("firing", firing=3))
        await ws.settle()
        await fire(slack, hook, notification("firing", firing=1))
        await ws.settle()
        doc = render(await gather(ws.store, ws.store.meta, ws.store, ALERTS, ts), None)
        assert "fired again" not in doc and "Alert partly resolved (1 still firing)" in doc
    finally:
        await ws.stop()


async def test_a_handover_keeps_an_earlier_run_s_unknown_change_open(redis_url: str, prefix: str,
                                                                    slack: FakeSlack) -> None:
    """A change cut off after it started, then one more question answered in the thread: the handover filed the
    thread under "Answered" (it read the latest run only) while its summary listed the change as open."""
    import asyncio
    from typing import Any

    from bot.agent.models.scripted import ScriptedModel, call, reply
    from tests.toolkit import Change
    from tools import ToolContext, tool

    @tool(description="A change that outlives its limit after starting.", mutating=True, timeout_s=0.2, args=Change)
    async def slow_change(args: Change, ctx: ToolContext) -> dict[str, Any]:
        await asyncio.sleep(5)
        return {}

    model = ScriptedModel([reply("", call("slow_change", "s1", target="api", environment="staging")),
                           reply("It may or may not have gone through."), reply("Nothing else.")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[slow_change])
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "change api", "500.1"))
        await ws.settle()
        await ws.sender.event(mention(CHANNEL, "UREQ", "thanks, anything else?", "500.2", thread_ts="500.1"))
        await ws.settle()
        text = await ws.service.inbound.incidents.handover.text(CHANNEL, 4, "en")
        open_part, answered = text.split("*Pending confirmations*")[0], text.split("*Answered")[1]
        assert "change api" not in answered and "outcome unknown" in open_part, text
    finally:
        await ws.stop()


async def test_a_summary_finds_its_changes_behind_newer_audit_entries(redis_url: str, prefix: str,
                                                                       slack: FakeSlack) -> None:
    """2000 newer decided changes of other threads in the same audit shard hid the thread's restart: "No change was
    made through OpsPilot" beside "restart_service ×1"."""
    import json
    import time

    from bot.slack.incidents.document import render
    from state.keys import shard_of
    from tests.slack_harness import restarted

    ws = await open_workspace(redis_url, prefix, slack, language="en")
    try:
        await restarted(ws)
        stream = ws.store.keys.audit(shard_of(f"slack:{CHANNEL}:100.1"))
        pipe = ws.store.client.pipeline(transaction=False)
        for i in range(2000):  # other threads of the same shard, later: their own decided changes
            pipe.xadd(stream, {"at": f"{time.time():.3f}", "run_id": f"other-{i}", "thread_id": f"slack:C0X:{i}.1",
                               "call_id": f"c{i}", "tool": "scale_service",
                               "arguments": json.dumps({"service_id": "x"}),
                               "requested_by": "UX", "approved_by": "", "status": "error",
                               "error_code": "declined_by_user", "result": "", "rollout": ""})
        await pipe.execute()
        doc = render(await gather(ws.store, ws.store.meta, ws.store, CHANNEL, "100.1"), None)
        assert "No change was made through OpsPilot" not in doc and "UAPPROVER" in doc
    finally:
        await ws.stop()


async def test_an_earlier_thread_of_an_alert_learns_its_group_resolved(redis_url: str, prefix: str,
                                                                      slack: FakeSlack) -> None:
    """Repeated past the dedupe window, an alert opens a new thread; the group's resolution was logged there only,
    and the first thread's summary and the handover kept saying "still firing" for good."""
    from bot.slack.incidents.document import render

    ws = await open_workspace(redis_url, prefix, slack, alert_sources=[source()])
    slack.deliver = ws.sender.event
    try:
        hook = slack.add_webhook(ALERTS)
        first = await fire(slack, hook, notification("firing"))
        await ws.settle()
        async for key in ws.store.client.scan_iter(match=f"{ws.store.keys.prefix}:claimed:alert:*"):
            await ws.store.client.delete(key)  # the dedupe window (the claim's TTL) has passed
        second = await fire(slack, hook, notification("firing"))
        await ws.settle()
        assert first != second
        await fire(slack, hook, notification("resolved"))
        await ws.settle()
        doc = render(await gather(ws.store, ws.store.meta, ws.store, ALERTS, first), None)
        assert "still firing" not in doc and "has not resolved" not in doc
        assert "alert still firing" not in await ws.service.inbound.incidents.handover.text(ALERTS, 4, "en")
    finally:
        await ws.stop()


def test_a_stalled_run_is_open_and_a_card_past_its_expiry_is_not_waiting() -> None:
    """"Open questions: none on record" beside a run that waits for Resume; "Waiting for confirmation … expires" for
    a card whose expiry passed while OpsPilot was away (not closed yet)."""
    from bot.slack.incidents.document import render
    from bot.slack.incidents.incident import Incident
    from core.messages import ToolCall
    from state.records import PendingCall, RunRecord

    card = PendingCall(call=ToolCall(id="c1", name="restart_service", arguments={"service_id": "payments"}),
                       token="t1", interrupt_type="confirm_risky", reason="prod", payload={},
                       arguments={"service_id": "payments", "environment": "prod"}, step=1, created_at=1000.0,
                       expires_at=1900.0)
    paused = RunRecord(run_id="r1", thread_id="slack:C1:1.1", user_id="UREQ", text="restart", status="paused",
                       pending=[card], created_at=1000.0, updated_at=1000.0)
    stalled = RunRecord(run_id="r2", thread_id="slack:C1:1.1", user_id="UREQ", text="look", status="stalled",
                        created_at=2000.0, updated_at=2100.0)
    incident = Incident("C1", "1.1", "en", "payments", [], [], [paused, stalled], [], [])
    doc = render(incident, None, now=5000.0)
    assert "Waiting for confirmation" not in doc and "Not answered: `restart_service`" in doc, doc
    assert "stopped partway (its worker stopped): it waits for someone to press Resume" in doc


async def test_an_alert_s_question_stays_dated_after_a_reply_continues_its_run(redis_url: str, prefix: str,
                                                                              slack: FakeSlack) -> None:
    """A reply in the thread continues the paused run and becomes its latest request: the alert's question, dated
    by the run that took it, was then dated by nothing and left the timeline."""
    from bot.agent.models.scripted import ScriptedModel, call, reply
    from tests.toolkit import Probe, toolkit

    tools = toolkit(Probe())
    model = ScriptedModel([reply("Changing.", call("change", "c1", target="payments", environment="prod")),
                           reply("ok, only reading then")])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[tools["change"]],
                              alert_sources=[source(mode="button")],
                              approvers={"change": {"prod": {"users": ["UBOSS"]}}})
    slack.deliver = ws.sender.event
    try:
        ts = await _investigated(ws)
        started = await ws.store.load_run(await ws.store.thread_run(thread_key(ALERTS, ts)) or "")
        assert started is not None and started.status == "paused"
        await ws.sender.event(mention(ALERTS, "UONCALL", "no, don't change anything", "9999000001.1", thread_ts=ts))
        await ws.settle()
        [alert_question] = [a for a in (await gather(ws.store, ws.store.meta, ws.store, ALERTS, ts)).asked
                            if a.automatic]
        assert alert_question.at == started.created_at
    finally:
        await ws.stop()


async def test_an_alert_group_remembers_its_last_threads_each_once(redis_url: str, prefix: str,
                                                                   slack: FakeSlack) -> None:
    """Each thread was kept twice in the group's list, so only about half of the last eight learnt it resolved."""
    from bot.slack.alerts.investigations import THREADS_KEPT
    from bot.slack.inbound.thread_log import alert_events

    ws = await open_workspace(redis_url, prefix, slack, alert_sources=[source()])
    slack.deliver = ws.sender.event
    try:
        hook = slack.add_webhook(ALERTS)
        threads = []
        for _ in range(THREADS_KEPT - 1):
            threads.append(await fire(slack, hook, notification("firing")))
            await ws.settle()
            async for key in ws.store.client.scan_iter(match=f"{ws.store.keys.prefix}:claimed:alert:*"):
                await ws.store.client.delete(key)  # the dedupe window has passed: the next repeat opens a thread
        await fire(slack, hook, notification("resolved"))
        await ws.settle()
        for ts in threads:
            assert (await alert_events(ws.store.meta, ALERTS, ts))[-1].kind == "resolved", ts
    finally:
        await ws.stop()


async def test_a_rollback_press_is_not_shown_as_the_presser_s_words(redis_url: str, prefix: str,
                                                                   slack: FakeSlack) -> None:
    """The question a "Roll back to …" press composes ("<@UREQ> pressed …") was a person's words with no time: left
    off the timeline, a raw mention where it showed."""
    from bot.slack.incidents.document import render
    from bot.slack.rollbacks.offer import ROLLBACK

    ws = await open_workspace(redis_url, prefix, slack, language="auto")
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "was it the deploy that broke orders in staging?", "805.1"))
        await ws.settle()
        [(answer, button)] = [(m, b) for m in slack.thread(CHANNEL, "805.1") for b in buttons(m)
                              if b["action_id"] == ROLLBACK]
        await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=copy.deepcopy(answer),
                                            action_id=ROLLBACK, value=str(button["value"])))
        await ws.settle()
        incident = await gather(ws.store, ws.store.meta, ws.store, CHANNEL, "805.1")
        [pressed] = [a for a in incident.asked if a.rollback]
        assert pressed.automatic and pressed.at is not None and pressed.ts == "805.1"
        doc = render(incident, None)
        assert "Rollback asked for by @UREQ" in doc and 'pressed "Roll back' not in doc
    finally:
        await ws.stop()
