"""One language per thread, all of it: whole scenarios played through the Slack endpoint — a question with tool
steps, a form, a confirm card, the confirm, the answer with its audit, a reminder, a Stop, App Home — with every
text OpsPilot sent to Slack scanned for the other language outside code and quoted data."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from bot.agent.fallback import Fallback, Ran
from bot.demo.sender import block_action, mention, message, view_submission
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.slack.outbound.outputs import fallback_answer, output
from bot.slack.outbound.words import catalog
from tests.language_scan import chinese, english_runs, leaks, written
from tests.slack_harness import CHANNEL, Workspace, open_workspace
from tests.test_alerts import ALERTS, fire, notification, source

SCENARIOS = {  # the thread's first question, a restart without an environment, a question to stop halfway
    "zh": ("看看支付服务最近报错，顺便对照一下文档里的处理建议", "重启一下", "订单服务出了什么问题？", "重启订单服务"),
    "en": ("look at the payment service's recent errors and what the runbook says", "restart it",
           "what is wrong with the order service?", "restart the order service"),
}


def _with(slack: FakeSlack, thread: str, action_id: str) -> dict[str, Any]:
    return next(m for m in reversed(slack.thread(CHANNEL, thread)) if any(b["action_id"] == action_id
                                                                          for b in buttons(m)))


async def _press(ws: Workspace, user: str, thread: str, action_id: str, **state: Any) -> None:
    msg = _with(ws.slack, thread, action_id)
    value = next(b["value"] for b in buttons(msg) if b["action_id"] == action_id)
    await ws.sender.action(block_action(user=user, channel=CHANNEL, message=msg, action_id=action_id, value=value,
                                        state=state or None))
    await ws.settle()


async def play(ws: Workspace, lang: str) -> None:
    ask, restart, other, restart_other = SCENARIOS[lang]
    ws.slack.post_as_user(CHANNEL, "UREQ", ask, ts="500.1")  # a stream answers a message that exists
    await ws.sender.event(mention(CHANNEL, "UREQ", ask, "500.1"))
    await ws.settle()
    await ws.sender.event(message(CHANNEL, "UREQ", restart, "500.2", thread_ts="500.1"))
    await ws.settle()
    prod = {"opspilot_field:environment": {"value": {"type": "static_select", "selected_option": {"value": "prod"}}}}
    await _press(ws, "UREQ", "500.1", "opspilot_submit", values=prod)
    record = await ws.store.load_run(await ws.store.thread_run(f"slack:{CHANNEL}:500.1") or "")
    assert record is not None and record.pending, "the restart waits for a confirmation"
    await ws.service.reminders.sweep(now=record.pending[0].expires_at - 60)  # the requester is reminded
    await ws.settle()
    await _press(ws, "UBOSS", "500.1", "opspilot_confirm")
    assert len(ws.toolbox.restarts.done) == 1

    # Another thread: a question, then a restart left waiting for its form, stopped.
    ws.slack.post_as_user(CHANNEL, "UREQ", other, ts="600.1")
    await ws.sender.event(mention(CHANNEL, "UREQ", other, "600.1"))
    await ws.settle()
    await ws.sender.event(message(CHANNEL, "UREQ", restart_other, "600.2", thread_ts="600.1"))
    await ws.settle()
    # A paused stream offers no Stop (it ended at the pause): its form's Cancel ends the run instead.
    stoppable = any(b["action_id"] == "opspilot_stop" for m in ws.slack.thread(CHANNEL, "600.1") for b in buttons(m))
    await _press(ws, "UREQ", "600.1", "opspilot_stop" if stoppable else "opspilot_decline")
    # A third: a restart whose card nobody answers, expired (its answer was English, composed by the engine).
    ws.slack.post_as_user(CHANNEL, "UREQ", other, ts="700.1")
    await ws.sender.event(mention(CHANNEL, "UREQ", other, "700.1"))
    await ws.settle()
    await ws.sender.event(message(CHANNEL, "UREQ", restart_other, "700.2", thread_ts="700.1"))
    await ws.settle()
    await _press(ws, "UREQ", "700.1", "opspilot_submit", values=prod)
    await ws.service.core.sweeps.sweep(now=time.time() + 3 * 3600)
    await ws.settle()
    await ws.sender.event({"type": "app_home_opened", "user": "UREQ", "channel": "D0HOME", "tab": "home",
                           "event_ts": f"{time.time():.6f}"})
    await ws.settle()


@pytest.mark.parametrize("progress", ["stream", "update"])
@pytest.mark.parametrize("lang", ["zh", "en"])
async def test_every_text_of_a_thread_is_in_its_language(redis_url: str, prefix: str, slack: FakeSlack,
                                                         lang: str, progress: str) -> None:
    ws = await open_workspace(redis_url, prefix, slack, language="auto", progress=progress, reminder_before_s=300)
    try:
        await play(ws, lang)
    finally:
        await ws.stop()
    shown = written(slack.calls)
    everything = "\n".join(shown)
    # Every part of the scenario was shown (so the scan below covered it), in the thread's words.
    parts = ["need_more", "confirmation_needed", "home_recent", "trend_steady_high", "audit", "audit_expired"] + \
        (["ran_title", "ran_not_started"] if progress == "update" else ["declined_by"])
    for key in parts:
        template = catalog()[key][lang == "zh"]
        assert max(re.split(r"\{[^}]*\}", template), key=len) in everything, key
    assert ":alarm_clock: <@UREQ>" in everything and slack.homes.get("UREQ")
    # The change that expired after its form: its audit line names the environment chosen there (it was left out)
    asked = max(re.split(r"\{[^}]*\}", catalog()["requested_by"][lang == "zh"]), key=len)
    expired = next(line for line in everything.splitlines()
                   if catalog()["audit_expired"][lang == "zh"] in line and asked in line)
    assert "`prod`" in expired, expired
    assert {"zh": "行错误日志", "en": "error lines in"}[lang] in everything  # a task's output
    found = leaks(shown, lang, proper=("environment",))
    assert not found, "\n".join(dict.fromkeys(f"{hit!r} in …{_around(hit, text)}…" for hit, text in found))


def _around(hit: str, text: str, width: int = 40) -> str:
    at = text.find(hit)
    return text[max(at - width, 0):at + len(hit) + width] if at >= 0 else text[:2 * width]


_FIG = {"current": 0.043, "trend": "steady high", "peak": 0.044, "onset_at": "2026-12-02T09:43:00Z"}
RESULTS = [  # (status, error code, body): what each kind of tool result looks like to a front end
    ("ok", None, {"ok": True, "data": {"candidates": [{"id": "payments"}]}}),
    ("ok", None, {"ok": True, "data": {"ambiguous": True, "candidates": [{"id": "payments"}, {"id": "orders"}]}}),
    ("ok", None, {"ok": True, "data": {"results": [{"title": "x"}] * 3}}),
    ("ok", None, {"ok": True, "data": {"error_lines": 90, "window_minutes": 60,
                                       "patterns": [{"pattern": "timeout acquiring connection", "count": 83}]}}),
    ("ok", None, {"ok": True, "data": {"error_lines": 0, "window_minutes": 60, "patterns": []}}),
    ("ok", None, {"ok": True, "data": {"metrics": {
        "error_rate": _FIG, "p95_latency_ms": {"current": 62, "trend": "spiked and recovered", "peak": 310,
                                               "onset_at": "2026-12-02T09:11:00Z",
                                               "recovered_at": "2026-12-02T09:15:00Z"},
        "restarts": {"current": 0, "trend": "flat"}}}}),
    ("ok", None, {"ok": True, "data": {"metrics": {"cpu": {"points": 0, "trend": "no data"},
                                                   "q": {**_FIG, "trend": "falling"},
                                                   "r": {"current": 1.0, "trend": "a word we do not know"}}}}),
    ("ok", None, {"ok": True, "data": {"window": {"minutes": 1440}, "unavailable": [{"source": "kubernetes"}],
                                       "changes": [{"kind": "deploy", "version": "2026.12.02-1",
                                                    "at": "2026-12-02T09:10:00Z"}]}}),
    ("ok", None, {"ok": True, "data": {"window": {"minutes": 60}, "changes": []}}),
    *[("ok", None, {"ok": True, "data": {"rollout": r, "verdict": "…", "error_rate_before": 0.043,
                                         "error_rate_after": 0.002}}) for r in ("complete", "timed_out", "odd")],
    ("ok", None, {"ok": True, "data": {"summary": "an MCP tool's own words"}}),
    ("ok", None, {"ok": True, "data": {"replicas": 3}}),
    ("ok", None, {}),
    ("error", "not_found", {"ok": False, "errorCode": "not_found", "message": "no service is named 'x'"}),
    ("error", "timeout", {"ok": False, "errorCode": "timeout", "message": "query_logs took longer than 30 s"}),
    ("error", "declined_by_user", {"ok": False, "errorCode": "declined_by_user", "message": "declined in Slack"}),
    ("error", "outcome_unknown", {"ok": False, "errorCode": "outcome_unknown", "message": "may have run"}),
    ("expired", "expired", {"ok": False, "errorCode": "expired", "message": "nobody answered"}),
    ("cancelled", "cancelled", {"ok": False, "errorCode": "cancelled", "message": "the run was stopped; nothing "
                                                                                  "was run"}),
    ("cancelled", "interrupted_by_restart", {"ok": False, "errorCode": "interrupted_by_restart", "message": "…"}),
]


@pytest.mark.parametrize(("status", "code", "body"), RESULTS)
def test_what_a_tool_found_is_said_in_each_language(status: str, code: str | None, body: dict[str, Any]) -> None:
    zh, en = output(status, code, body, "zh", "90 error lines"), output(status, code, body, "en", "x")
    assert zh and en and not english_runs(zh, ("kubernetes",)) and not chinese(en), (zh, en)


def test_the_words_of_a_tool_output_and_of_a_composed_answer() -> None:
    long = "no service is named 'unicorn-billing' (by id, name or alias); known services: " + ", ".join(
        f"service-{i}" for i in range(20))
    cut = output("error", "not_found", {"ok": False, "errorCode": "not_found", "message": long}, "en")
    assert cut.startswith("not_found: no service is named") and cut.endswith("…")  # cut, and says so
    logs = RESULTS[3]
    assert output(*logs, "en") == "90 error lines in 60 min; most often `timeout acquiring connection` ×83"
    assert output(*logs, "zh") == "60 分钟内 90 行错误日志；最多的是 `timeout acquiring connection` ×83"
    assert output(*RESULTS[5], "zh").startswith("`error_rate` 0.043，09:43 起持续偏高；`p95_latency_ms` 62，曾飙升")
    ran = (Ran(tool="query_logs", target="payments/prod", outcome="done"),
           Ran(tool="restart_service", target="payments/prod", outcome="unknown"),
           Ran(tool="lookup", outcome="failed", code="timeout"))
    for fallback in (Fallback(kind="stopped", reason="cancelled", at="10:42 UTC", ran=ran),
                     Fallback(kind="early", reason="max_steps", ran=ran),
                     Fallback(kind="failed", reason="model_error", why="the model API is overloaded", ran=ran)):
        zh, en = fallback_answer(fallback, "zh", "<@UBOB>"), fallback_answer(fallback, "en")
        assert "执行情况：" in zh and "• `restart_service`（payments/prod）：已开始，结果未知" in zh
        assert not english_runs(zh) and not chinese(en), (zh, en)
        assert en == fallback.english() or fallback.kind != "stopped"  # English as the transcript keeps it
    assert fallback_answer(Fallback(kind="early", reason="max_steps", summary="模型自己的总结 <!channel>"), "zh") == \
        "_达到步数上限，已停止。_\n\n模型自己的总结 &lt;!channel&gt;"  # the model's words, escaped


async def play_alerts(ws: Workspace, lang: str, errors: list[str]) -> None:
    """An alert thread's life after the question: investigated, fired again, a second alert held back and
    investigated on a click (twice), resolved; 👎 with its form, 👍, a second 👎; a summary as a canvas and, canvases
    refused, as a file; a handover; App Home."""
    slack = ws.slack
    hook = slack.add_webhook(ALERTS)
    alert_ts = await fire(slack, hook, notification("firing"))
    await ws.settle()
    await fire(slack, hook, notification("firing", firing=2))
    await ws.settle()
    held = await fire(slack, hook, notification("firing", name="OrdersLatencyHigh", service="orders"))
    await ws.settle()
    offer = next(m for m in slack.thread(ALERTS, held) if buttons(m))
    click = block_action(user="UREQ", channel=ALERTS, message=offer, action_id="opspilot_investigate", value=held)
    await ws.sender.action(click)
    await ws.settle()
    await ws.sender.action(click)  # again: "already on it"
    await ws.settle()
    await fire(slack, hook, notification("resolved"))
    await ws.settle()

    answer = next(m for m in reversed(slack.thread(ALERTS, alert_ts)) if any(
        b["action_id"] == "opspilot_feedback_down" for b in buttons(m)))

    async def rate(user: str, rating: str) -> None:
        button = next(b for b in buttons(answer) if b["action_id"] == f"opspilot_feedback_{rating}")
        await ws.sender.action(block_action(user=user, channel=ALERTS, message=answer, action_id=button["action_id"],
                                            value=button["value"]))
        await ws.settle()

    await rate("UREQ", "down")
    view = slack.modals[0]["view"]
    empty = {"reason": {"reason": {"type": "radio_buttons", "selected_option": None}},
             "note": {"note": {"type": "plain_text_input", "value": None}}}
    _, refused = await ws.sender.action(view_submission(user="UREQ", view=view, values=empty))  # nothing chosen
    errors.append(json.loads(refused)["errors"]["reason"])  # said in the form, not through the Web API
    chosen = {**empty, "reason": {"reason": {"type": "radio_buttons", "selected_option": {"value": "missed"}}}}
    await ws.sender.action(view_submission(user="UREQ", view=view, values=chosen))
    await ws.settle()
    await rate("UOTHER", "up")
    await rate("UREQ", "down")  # again: already rated

    summarize = {"zh": "总结", "en": "summarize"}[lang]
    posted = slack.post_as_user(ALERTS, "UREQ", f"<@UBOT> {summarize}", thread_ts=alert_ts)
    await ws.sender.event(mention(ALERTS, "UREQ", summarize, posted["ts"], thread_ts=alert_ts))
    await ws.settle()
    slack.canvases_refused = "canvas_disabled_user_team"
    await ws.sender.action({"type": "message_action", "callback_id": "opspilot_summarize_incident",
                            "trigger_id": "8.1", "team": {"id": "T0001"}, "user": {"id": "UREQ"},
                            "channel": {"id": ALERTS}, "message": {"ts": posted["ts"], "thread_ts": alert_ts,
                                                                   "text": summarize, "user": "UREQ"},
                            "response_url": "https://x.test/r"})
    await ws.settle()
    await ws.sender.command({"command": "/opspilot", "text": "handover 4", "user_id": "UREQ", "channel_id": ALERTS,
                             "team_id": "T0001", "trigger_id": "9.9", "response_url": "https://hooks.slack.test/c"})
    await ws.sender.command({"command": "/opspilot", "text": "summary", "user_id": "UREQ", "channel_id": ALERTS,
                             "team_id": "T0001", "trigger_id": "9.8", "response_url": "https://hooks.slack.test/c"})
    await ws.sender.event({"type": "app_home_opened", "user": "UREQ", "channel": "D0HOME", "tab": "home",
                           "event_ts": f"{time.time():.6f}"})
    await ws.settle()


@pytest.mark.parametrize("lang", ["zh", "en"])
async def test_alert_threads_feedback_and_summaries_are_in_the_threads_language(redis_url: str, prefix: str,
                                                                                slack: FakeSlack, lang: str) -> None:
    # Alertmanager writes English: a Chinese team says so in its config (slack.language), as the README tells.
    ws = await open_workspace(redis_url, prefix, slack, language="zh" if lang == "zh" else "auto",
                              alert_sources=[source(max_runs=1)])
    slack.deliver = ws.sender.event
    try:
        await play_alerts(ws, lang, errors := [])
    finally:
        await ws.stop()
    shown = written(slack.calls) + errors
    everything = "\n".join(shown)
    parts = ["alert_fired_again", "alert_resolved", "alert_storm", "alert_on_it", "fb_title", "fb_choose",
             "thanks_reason", "thanks_up", "rated", "inc_timeline", "inc_in_canvas", "inc_as_file", "ho_title",
             "inc_usage", "home_latest_down"]
    missing = [key for key in parts
               if max(re.split(r"\{[^}]*\}", catalog()[key][lang == "zh"]), key=len) not in everything]
    assert not missing, missing
    found = leaks(shown, lang, proper=("environment", "PaymentsHighErrorRate", "OrdersLatencyHigh"))
    assert not found, "\n".join(dict.fromkeys(f"{hit!r} in …{_around(hit, text)}…" for hit, text in found))


async def test_refusals_of_follow_ups_and_schedules_are_in_the_thread_s_language(redis_url: str, prefix: str,
                                                                                  slack: FakeSlack) -> None:
    """A Re-check refused by the per-person cap read "没有安排跟进：UREQ already has 1 follow-ups pending…" (the
    model's English, an id, a wrong plural); a schedule that never fires, "未创建：`…` never fires again"."""
    from bot.run_limits import UNLIMITED

    limits = UNLIMITED.model_copy(update={"followups_per_person": 1})
    ws = await open_workspace(redis_url, prefix, slack, language="auto", progress="update", run_limits=limits)
    try:
        ask, restart, _, _ = SCENARIOS["zh"]
        prod = {"opspilot_field:environment": {"value": {"type": "static_select",
                                                          "selected_option": {"value": "prod"}}}}
        for thread in ("900.1", "901.1"):
            ws.slack.post_as_user(CHANNEL, "UREQ", ask, ts=thread)
            await ws.sender.event(mention(CHANNEL, "UREQ", ask, thread))
            await ws.settle()
            await ws.sender.event(message(CHANNEL, "UREQ", restart, f"{thread}1", thread_ts=thread))
            await ws.settle()
            await _press(ws, "UREQ", thread, "opspilot_submit", values=prod)
            await _press(ws, "UBOSS", thread, "opspilot_confirm")
            await _press(ws, "UREQ", thread, "opspilot_recheck")
        for text in ('schedule "0 0 30 2 *" Asia/Shanghai 支付服务最近的报错',
                     'schedule "bad cron x y" Asia/Shanghai 支付服务最近的报错'):
            await ws.sender.command({"command": "/opspilot", "text": text, "user_id": "UREQ", "channel_id": CHANNEL,
                                     "trigger_id": f"t-{text[:14]}", "response_url": slack.response_url()})
            await ws.settle()
    finally:
        await ws.stop()
    told = slack.ephemeral_texts("UREQ")
    assert any("已达每人上限" in t for t in told) and not any("UREQ" in t for t in told), told
    assert any("以后不会再触发" in t for t in told), told
    found = leaks(told, "zh", proper=("environment", "crontab"))  # a term of the trade, as Chinese engineers write it
    assert not found, found


async def test_a_form_s_refusal_is_in_the_thread_s_language(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    """A Chinese thread's form submitted with nothing chosen read "未接受：`invalid values: environment: nothing
    chosen`": the engine's English sentence."""
    ws = await open_workspace(redis_url, prefix, slack, language="auto", progress="update")
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "看看支付服务最近报错", "510.1"))
        await ws.settle()
        await ws.sender.event(message(CHANNEL, "UREQ", "重启一下", "510.2", thread_ts="510.1"))
        await ws.settle()
        empty = {"opspilot_field:environment": {"value": {"type": "static_select", "selected_option": None}}}
        await _press(ws, "UREQ", "510.1", "opspilot_submit", values=empty)
        shown = all_text(_with(ws.slack, "510.1", "opspilot_submit"))
        assert "未接受：请选择环境" in shown and "nothing chosen" not in shown, shown
    finally:
        await ws.stop()


async def test_the_note_of_a_file_is_for_the_model_not_shown_as_the_person_s_words(redis_url: str, prefix: str,
                                                                                   slack: FakeSlack) -> None:
    """A Chinese question with a screenshot: OpsPilot's English "(Attached, not read: …)" was shown as part of the
    person's question on their Chinese App Home and in the handover."""
    import json
    import time

    ws = await open_workspace(redis_url, prefix, slack, language="auto", progress="update")
    try:
        event = mention(CHANNEL, "UREQ", "支付服务报错了，看看这个截图", "520.1")
        event["files"] = [{"id": "F1", "name": "报错截图.png"}]
        slack.post_as_user(CHANNEL, "UREQ", event["text"], ts="520.1")
        await ws.sender.event(event)
        await ws.settle()
        transcript = await ws.store.load_transcript(f"slack:{CHANNEL}:520.1")
        assert "Attached, not read: 报错截图.png" in transcript[0].content  # the model is told
        await ws.sender.event({"type": "app_home_opened", "user": "UREQ", "channel": "D0HOME", "tab": "home",
                               "event_ts": f"{time.time():.6f}"})
        await ws.sender.command({"command": "/opspilot", "text": "handover", "user_id": "UREQ", "channel_id": CHANNEL,
                                 "trigger_id": "ho-7", "response_url": slack.response_url()})
        await ws.settle()
        home = json.dumps(slack.homes["UREQ"], ensure_ascii=False)
        handover = json.dumps(slack.responses + [m for m in slack.messages.values()], ensure_ascii=False)
        assert "支付服务报错了，看看这个截图" in home and "Attached, not read" not in home, home
        assert "Attached, not read" not in handover
    finally:
        await ws.stop()
