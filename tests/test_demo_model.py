"""The scripted demo model off its script, in both languages, through the real app: it never answers a
different service than asked, never shows an empty section, and goes straight to the card for a direct
restart."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.agent.models.demo_checks import follow_up
from bot.agent.models.demo_intent import read
from bot.demo.sender import block_action, mention, message
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.slack.followups.buttons import RECHECK
from bot.slack.outbound.thread_meta import thread_key
from core.messages import ToolResultMessage, UserMessage
from tests.language_scan import chinese, english_runs
from tests.slack_harness import CHANNEL, Workspace, open_workspace
from tests.test_timers import Clock, open_at, tick


@pytest.fixture
async def ws(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[Workspace]:
    workspace = await open_workspace(redis_url, prefix, slack, language="auto")  # each thread in its language
    yield workspace
    await workspace.stop()


async def ask(ws: Workspace, text: str, ts: str) -> str:
    await ws.sender.event(mention(CHANNEL, "UREQ", text, ts))
    await ws.settle()
    return all_text(ws.slack.thread(CHANNEL, ts)[-1])


async def rechecked(ws: Workspace, clock: Clock, answer: dict[str, Any], thread: str) -> str:
    """Re-check pressed under ``answer``, its follow-up due and run: what it said."""
    run_id = next(b["value"] for b in buttons(answer) if b["action_id"] == RECHECK)
    await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=copy.deepcopy(answer),
                                        action_id=RECHECK, value=run_id))
    await ws.settle()
    [timer] = await ws.store.timers.pending(thread_key(CHANNEL, thread))
    clock.now = timer.due
    assert await tick(ws) == 1
    await ws.settle()
    return str(ws.slack.thread(CHANNEL, thread)[-1]["text"])


async def confirmed_restart(ws: Workspace, question: str, restart: str, ts: str) -> dict[str, Any]:
    """``question`` in thread ``ts``.1, then ``restart`` in it, its card confirmed by UAPPROVER: the answer."""
    await ask(ws, question, f"{ts}.1")
    await ws.sender.event(message(CHANNEL, "UREQ", restart, f"{ts}.2", thread_ts=f"{ts}.1"))
    await ws.settle()
    card = next(m for m in ws.slack.thread(CHANNEL, f"{ts}.1") if any(
        b["action_id"] == "opspilot_confirm" for b in buttons(m)))
    token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
    await ws.sender.action(block_action(user="UAPPROVER", channel=CHANNEL, message=copy.deepcopy(card),
                                        action_id="opspilot_confirm", value=token))
    await ws.settle()
    return ws.slack.thread(CHANNEL, f"{ts}.1")[-1]


@pytest.mark.parametrize(("question", "expected", "absent"), [
    ("", ["I'm OpsPilot", "restart payments in prod"], ["search_resource"]),
    ("你好", ["我是 OpsPilot", "看看支付服务最近报错"], ["search_resource"]),
    ("why is checkout slow?", ["There is no service named `checkout`", "Known services: payments, orders, gateway"],
     ["Payment Service", "Runbook advice", "failed"]),
    ("看看 billing-ledger 服务最近报错",
     ["服务目录里没有名为 `billing-ledger` 的服务", "已知的服务：payments, orders, gateway"], ["API Gateway"]),
    ("check paymnets errors", ["no service named `paymnets`", "Did you mean Payment Service (payments)?"], []),
    # A pasted blob named as a service is quoted in part, not echoed whole.
    (f"check the {'z' * 3000} service", [f"no service named `{'z' * 63}…`"], ['z' * 65]),
    ("look at the payment service's recent errors and compare with the runbook's advice",
     ["*Service*: Payment Service", "*Recent errors*", "*Runbook advice*", "error rate 4.3%",
      "docs/payments-db-timeouts.md"], ["*服务*"]),  # its main runbook (written in Chinese), quoted as it is
])
async def test_off_script_questions_get_a_straight_answer(ws: Workspace, question: str, expected: list[str],
                                                          absent: list[str]) -> None:
    answer = await ask(ws, question, "700.1")
    for text in expected:
        assert text in answer, answer
    for text in absent:
        assert text not in answer, answer
    lines = answer.splitlines()
    headings = [i for i, line in enumerate(lines) if line.rstrip().endswith(("*:", ":*"))]
    assert all(i + 1 < len(lines) and lines[i + 1].startswith("  •") for i in headings), answer  # none empty


@pytest.mark.parametrize("question", ["restart payments in prod", "重启支付服务（生产环境）"])
async def test_a_direct_restart_goes_straight_to_the_confirm_card(ws: Workspace, question: str) -> None:
    await ask(ws, question, "710.1")
    card = next(m for m in ws.slack.thread(CHANNEL, "710.1") if any(
        b["action_id"] == "opspilot_confirm" for b in buttons(m)))
    assert "`payments`" in all_text(card) and "`prod`" in all_text(card)
    assert ws.toolbox.restarts.done == []


@pytest.mark.parametrize(("lang", "question", "restart", "expected"), [
    ("en", "look at the payment service's recent errors", "restart it in prod",
     ["*Follow-up on payments (prod)*: error rate now 0.30% (spiked and recovered)",
      "  • Before the restart: 4.3% (`restart_service`)", "  • Right after the restart: 0.30% (`restart_service`)",
      "Better than before the restart: 4.3% → 0.30%."]),
    ("zh", "看看支付服务最近报错", "重启它（生产环境）",
     ["*跟进 payments（prod）*：错误率现在 0.30%（曾飙升，已恢复）", "  • 重启前：4.3%（`restart_service`）",
      "  • 重启刚完成时：0.30%（`restart_service`）", "比重启前好：4.3% → 0.30%。"]),
])
async def test_a_follow_up_after_a_restart_compares_now_with_before_it_in_the_threads_language(
        redis_url: str, prefix: str, slack: FakeSlack, lang: str, question: str, restart: str,
        expected: list[str]) -> None:
    clock = Clock()
    ws = await open_at(redis_url, prefix, slack, clock, language="auto")
    try:
        follow_up = await rechecked(ws, clock, await confirmed_restart(ws, question, restart, "750"), "750.1")
        head, *lines = follow_up.splitlines()
        assert head.startswith(expected[0]) and lines == expected[1:], follow_up  # the verdict its numbers give
        assert (english_runs(follow_up) if lang == "zh" else chinese(follow_up)) == [], follow_up
    finally:
        await ws.stop()


def test_a_follow_up_without_a_change_compares_with_the_last_figure_found() -> None:
    def metrics(call_id: str, rate: float) -> ToolResultMessage:
        found = {"service_id": "payments", "environment": "prod",
                 "metrics": {"error_rate": {"current": rate, "trend": "rising"}}}
        return ToolResultMessage(call_id=call_id, name="query_metrics", content=json.dumps({"ok": True, "data": found}))

    thread = [UserMessage(content="payments errors?"), metrics("c1", 0.020), metrics("c2", 0.043),
              UserMessage(content="<@UREQ> 在 09:00 UTC 请求的跟进：还好吗？"), metrics("c3", 0.051)]
    answer = follow_up(thread, 3, ["query_metrics"], zh=True)
    assert answer is not None
    assert answer.content.splitlines()[1:] == ["  • 之前：4.3%（`query_metrics`）", "比之前差：4.3% → 5.1%。"]
    assert english_runs(answer.content) == [], answer.content


@pytest.mark.parametrize(("question", "expected", "absent"), [
    # A question about restarts is answered from the records: no card, no restart.
    ("how many restarts did payments have in prod?", ["*Restarts*", "Metric `restarts` (prod, 60 min): now 0"],
     ["Confirm", "Restarting"]),
    ("did the payments restart help?", ["no restart to judge"], ["Confirm", "Restarting"]),
    ("支付服务生产环境重启了几次？", ["*重启*", "变更记录里最近 24 小时的重启：0 次"], ["确认", "按要求重启"]),
    # "Was it rolled back?" is not "was it the deploy?": no "Yes: the errors began…".
    ("was the orders deploy rolled back?", ["*Rolled back?*", "No: no rollback is recorded in the last 24 h"],
     ["Yes:"]),
    # No service named: the catalog is read, never "no service named did/happened".
    ("did anything change in staging today?", ["today (2026-12-02, UTC)", "`deploy 2026.12.02-1` at 09:10:01"],
     ["no service named"]),
    ("what happened at 09:11?", ["*Around 09:11 UTC*", "5xx burst right after deploy 2026.12.02-1",
                                 "began 09:11, back by 09:15"], ["no service named"]),
    # A time later in the day than the data's now is yesterday's, and so is "yesterday": what led up to it, and no
    # figures of another time under its heading (it showed today's 08:00–10:00 under "Around 14:02").
    ("what happened at 14:02 in staging?", ["*Around 2026-12-01 14:02 UTC*", "read for the last 2 h only",
                                            "`deploy 2026.12.01-4` at 2026-12-01 14:02"], ["2026.12.02-1", "5xx"]),
    ("what happened yesterday at 09:11?", ["*Around 2026-12-01 09:11 UTC*"], ["5xx burst", "2026.12.02-1"]),
    # Chinese deploy words and a catalog alias followed by an environment word.
    ("orders 服务 5xx 变多了，是不是刚发版导致的？",
     ["*和发布有关吗？*", "是：报错在 2026.12.02-1 之后 5 秒 开始"], []),
    ("支付生产环境有问题吗？", ["错误率 4.3%", "`payments-prod.jsonl` 最近 60 分钟的错误行"],
     ["没有我认识的服务名", "error lines of"]),
    ("compare orders and payments error rates", ["*Comparison* (both in prod)"], ["staging"]),
    # A window past what a read may look back is read as far as it may, and said; "three days", "2 weeks" read.
    ("any orders errors in prod in the last 3 days?", ["`query_logs` at most 24 h"], ["validation_error"]),
    ("最近三天订单服务生产环境有什么变更？", ["`deploy 2026.11.30-2`"], ["没有变更"]),
    ("what changed for orders in prod in the last 2 weeks?", ["`deploy 2026.11.30-2`"], ["nothing changed"]),
])
async def test_questions_about_changes_are_answered_or_honestly_declined(ws: Workspace, question: str,
                                                                         expected: list[str],
                                                                         absent: list[str]) -> None:
    await ask(ws, question, "720.1")
    thread = ws.slack.thread(CHANNEL, "720.1")
    answer = all_text(thread[-1])
    for text in expected:
        assert text in answer, answer
    for text in absent:
        assert text not in answer, answer
    assert not any(b["action_id"] == "opspilot_confirm" for m in thread for b in buttons(m))  # no card, ever
    assert ws.toolbox.restarts.done == []


@pytest.mark.parametrize(("text", "change", "topics"), [
    ("restart payments in prod", "restart", set()),
    ("please restart it", "restart", set()),
    ("重启支付服务（生产环境）", "restart", set()),
    ("帮我回滚订单服务", "rollback", set()),
    ("roll back orders in staging", "rollback", set()),
    ("how many restarts did payments have in prod?", None, {"restarts"}),
    ("did the payments restart help?", None, {"restarts"}),
    ("支付服务重启了几次？", None, {"restarts"}),
    ("should we restart payments?", None, {"restarts"}),
    ("was the orders deploy rolled back?", None, {"rollback", "changes"}),
    ("订单服务的发版回滚了吗？", None, {"rollback", "changes"}),
    ("what changed for payments in the last hour?", None, {"changes"}),
    ("what happened at 09:11?", None, {"time"}),
    # Not doing it is no request (the demo asked "which environment?" to "never mind, no need to restart")
    ("算了，不用重启了", None, {"restarts"}), ("别回滚 orders", None, {"rollback"}),
    ("支付特别慢，重启一下", "restart", set()),
])
def test_only_an_imperative_asks_for_a_change(text: str, change: str | None, topics: set[str]) -> None:
    ask = read(text)
    assert ask.change == change and set(ask.topics) == topics


def test_windows_and_environments_are_read_from_the_question() -> None:
    assert read("what changed for payments in the last hour?").minutes == 60
    assert read("最近 2 小时 支付生产环境 有什么变更").minutes == 120
    assert read("支付生产环境有问题吗？").environment == "prod"
    assert read("网关预发环境").environment == "staging"
    assert read("09：45 发生了什么").at == "09:45"


async def test_a_rollback_asked_for_waits_on_a_card_showing_from_and_to(ws: Workspace) -> None:
    await ask(ws, "roll back orders in staging", "725.1")
    card = next(m for m in ws.slack.thread(CHANNEL, "725.1") if any(
        b["action_id"] == "opspilot_confirm" for b in buttons(m)))
    text = all_text(card)
    assert "*Release:* `2026.12.02-1` → `2026.12.01-4`" in text and "`orders-api:4.2.0` → `orders-api:4.1.9`" in text
    assert ws.toolbox.rollbacks.done == [] and ws.toolbox.restarts.done == []  # a card: nothing has changed


@pytest.mark.parametrize("zh", [False, True])
def test_a_change_is_said_done_only_when_its_rollout_completed(zh: bool) -> None:
    """Restarted / rolled back / scaled only on a completed rollout; issued-but-unverified said as such; the
    English sentence is built from the figures, not from the tool's own verdict text."""
    from bot.agent.models.demo_answers import answer_restart
    from bot.agent.models.demo_changes import answer_change

    def result(name: str, rollout: str, **more: Any) -> ToolResultMessage:
        body = {"service_id": "payments", "environment": "staging", "rollout": rollout, "error_rate_before": 0.001,
                "error_rate_after": 0.001, "verdict": "restarted; the error rate stayed at 0.10%", **more}
        return ToolResultMessage(call_id="c1", name=name, content=json.dumps({"ok": True, "data": body}))

    done = answer_restart(result("restart_service", "complete"), zh)
    assert done.startswith("已重启 `payments`（staging），滚动发布已完成；错误率保持在 0.10%" if zh else
                           "Restarted `payments` in staging: the rollout completed; the error rate stayed at 0.10%.")
    for rollout in ("timed_out", "failed", "unknown"):
        said = answer_restart(result("restart_service", rollout), zh)
        assert not said.startswith("已重启" if zh else "Restarted") and ("已发起重启" if zh else "was issued") in said
        moved = {"from": {"release": "r2"}, "to": {"release": "r1"}}
        changed = answer_change(result("rollback_service", rollout, **moved), zh)
        assert not changed.startswith("已回滚" if zh else "Rolled back")
        assert ("已发起回滚" if zh else "was issued") in changed
    assert ("尚未验证" if zh else "NOT verified") in answer_restart(result("restart_service", "timed_out"), zh)


@pytest.mark.parametrize(("question", "minutes"), [("last three days", 3 * 1440), ("past two hours", 120),
                                                   ("最近十五分钟", 15), ("最近二十天", 20 * 1440),
                                                   ("past half an hour", 30), ("last week", 7 * 1440),
                                                   ("past twenty-five minutes", 25), ("past eleven hours", 660),
                                                   ("最近一个半小时", 90)])
def test_windows_said_in_words_are_read(question: str, minutes: int) -> None:
    """"last three days" was 24 h, and the answer "No: nothing changed" over a deploy inside the three days."""
    assert read(question).minutes == minutes


def test_an_alerts_question_names_its_service_not_a_word_before_it() -> None:
    """An alert for a service the catalog lacks was answered "There is no service named `about`"."""
    from bot.agent.models.demo import _named

    question = "An alert fired (quoted above). It is about service `billing` and environment `prod`. Investigate it"
    assert _named(question, read(question)) == "billing"
    assert _named("why is the ledger service slow?", read("why is the ledger service slow?")) == "ledger"


async def test_a_run_stopped_at_its_limit_lists_what_ran_in_the_thread_s_language(redis_url: str, prefix: str,
                                                                                 slack: FakeSlack) -> None:
    """The demo model took the stop instruction for a new question: a Chinese thread stopped at its step limit read
    "_达到步数上限，已停止。_ Looking up the service and the runbooks in parallel."."""
    from bot.agent.limits import Limits
    from bot.agent.models.demo import demo_model

    ws = await open_workspace(redis_url, prefix, slack, model=demo_model(), language="auto", limits=Limits(max_steps=1))
    try:
        answer = await ask(ws, "看看支付服务最近报错", "600.1")
        assert "达到步数上限" in answer and "Looking up" not in answer and "同时查找" not in answer, answer
        assert not english_runs(answer), answer
    finally:
        await ws.stop()


@pytest.mark.parametrize(("question", "said"), [
    ("支付服务生产环境扩容 2 个副本", "扩容 2 个副本"), ("给支付服务生产环境扩容，加 2 个实例", "加 2 个实例"),
    ("支付服务生产环境缩容 1 个副本", "缩容 1 个副本"), ("scale payments in prod up by 2 replicas", "by 2"),
    ("scale payments in prod by 2 to handle traffic", "by 2"),
])
async def test_scaling_by_an_amount_asks_for_the_total_never_proposes_the_amount_as_one(
        ws: Workspace, question: str, said: str) -> None:
    """"扩容 2 个副本" (add 2) was read as "scale to 2": a prod card reading 3 → 2, a scale-down asked as a scale-up."""
    answer = await ask(ws, question, "730.1")
    thread = ws.slack.thread(CHANNEL, "730.1")
    assert not any(b["action_id"] == "opspilot_confirm" for m in thread for b in buttons(m)), answer
    assert said in answer and ("一共要多少个副本" if "副本" in said or "实例" in said else "how many replicas in all")\
        in answer, answer
    assert read(question).replicas is None


@pytest.mark.parametrize(("question", "replicas"), [
    ("把 payments 扩容到 6 个副本", 6), ("支付服务生产环境缩容至 2 个实例", 2), ("支付服务扩容为 5 个副本", 5),
    ("scale payments in prod to 4 replicas", 4), ("scale payments up by 2 to 5 replicas", 5),
])
def test_a_scale_to_a_count_is_read_as_that_count(question: str, replicas: int) -> None:
    assert read(question).change == "scale" and read(question).replicas == replicas
