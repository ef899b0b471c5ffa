"""One language per thread: a Chinese thread and an English thread, each in its own language throughout —
progress, cards, forms, how cards end, stop headlines — with the exact words checked."""

from __future__ import annotations

import re
import string
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.demo.sender import block_action, mention, message
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.slack.outbound.words import catalog, signal
from tests.slack_harness import CHANNEL, Workspace, open_workspace


def test_every_entry_exists_in_both_languages_with_the_same_placeholders() -> None:
    for key, (en, zh) in catalog().items():
        fields = {f for _, f, _, _ in string.Formatter().parse(en) if f}
        assert fields == {f for _, f, _, _ in string.Formatter().parse(zh) if f}, key
        assert en and zh and (en != zh or key in ("and",)), key


@pytest.fixture
async def ws(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[Workspace]:
    workspace = await open_workspace(redis_url, prefix, slack, language="auto")
    yield workspace
    await workspace.stop()


async def play(ws: Workspace, thread: str, question: str, restart: str) -> tuple[dict, dict, list[str]]:
    """Ask, ask for a restart without an environment, fill the form with prod, confirm: every text seen."""
    await ws.sender.event(mention(CHANNEL, "UREQ", question, thread))
    await ws.settle()
    await ws.sender.event(message(CHANNEL, "UREQ", restart, f"{thread}1", thread_ts=thread))
    await ws.settle()
    form = next(m for m in ws.slack.thread(CHANNEL, thread) if any(b["action_id"] == "opspilot_submit"
                                                                   for b in buttons(m)))
    token = next(b["value"] for b in buttons(form) if b["action_id"] == "opspilot_submit")
    shown_form = all_text(form)  # (the fake edits its messages in place)
    values = {"opspilot_field:environment": {"value": {"type": "static_select", "selected_option": {"value": "prod"}}}}
    await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=form, action_id="opspilot_submit",
                                        value=token, state={"values": values}))
    await ws.settle()
    card = next(m for m in ws.slack.thread(CHANNEL, thread) if any(b["action_id"] == "opspilot_confirm"
                                                                   for b in buttons(m)))
    token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
    shown_card = all_text(card)
    await ws.sender.action(block_action(user="UBOSS", channel=CHANNEL, message=card, action_id="opspilot_confirm",
                                        value=token))
    await ws.settle()
    texts = [all_text(m) for m in ws.slack.thread(CHANNEL, thread)]
    return {"form": shown_form, "card": shown_card}, {
        "form": all_text(ws.slack.messages[(CHANNEL, form["ts"])]),
        "card": all_text(ws.slack.messages[(CHANNEL, card["ts"])])}, texts


async def test_a_chinese_thread_stays_chinese(ws: Workspace) -> None:
    asked, closed, texts = await play(ws, "1000.1", "看看支付服务最近报错，顺便对照一下文档里的处理建议", "restart it")
    assert ":pencil: *还需要一点信息* — " in asked["form"]
    assert "用于 `restart_service`（`payments`）：你回答后立即继续（变更如需确认，仍会先请人确认）。" in asked["form"]
    assert ":warning: *需要确认* — `restart_service` 会改动 `prod`，需要有人确认" in asked["card"]
    assert "*工具:* `restart_service`" in asked["card"] and "*环境:* `prod`" in asked["card"]
    assert re.search(r":memo: <@UREQ> 于 \d\d:\d\d UTC 提交：环境 = `prod`", closed["form"])
    assert re.search(r":white_check_mark: <@UBOSS> 于 \d\d:\d\d UTC 确认", closed["card"])
    progress = next(t for t in texts if "第 " in t and " 步" in t)
    assert ":white_check_mark: 完成" in progress
    everything = "\n".join(texts)
    for english in ("Working on it", "Waiting for you", "Confirmation needed", "I need a bit more", "Done",
                    "Confirmed by", "Submitted by", "Restarted", "requested by", "step "):
        assert english not in everything, english
    assert "已重启 `payments`（prod）" in everything and "批准人 <@UBOSS>" in everything


async def test_an_english_thread_stays_english(ws: Workspace) -> None:
    asked, closed, texts = await play(ws, "1100.1", "look at the payment service's recent errors", "restart it")
    assert ":pencil: *I need a bit more* — " in asked["form"]
    assert "For `restart_service` on `payments`: it goes ahead as soon as you answer (a change still asks for any " \
        "confirmation it needs)." in asked["form"]
    assert ":warning: *Confirmation needed* — `restart_service` changes `prod`: a person must confirm" in asked["card"]
    assert re.search(r":memo: Submitted by <@UREQ> at \d\d:\d\d UTC: environment = `prod`", closed["form"])
    assert re.search(r":white_check_mark: Confirmed by <@UBOSS> at \d\d:\d\d UTC", closed["card"])
    everything = "\n".join(texts)
    # Our words are English; a runbook is quoted as it is written (the payments one is in Chinese).
    ours = "\n".join(line for line in everything.splitlines() if "(`docs/" not in line)
    assert re.search(r"[\u3400-\u9fff]", ours) is None, ours
    assert "Restarted `payments` in prod" in everything and "approved by <@UBOSS>" in everything


async def test_refusals_are_said_in_the_threads_language(redis_url: str, prefix: str, slack: FakeSlack) -> None:
    ws = await open_workspace(redis_url, prefix, slack, language="auto", allowed_users=["UREQ", "UBOSS"],
                              two_person_rule=["prod"])
    try:
        await ws.sender.event(mention(CHANNEL, "UOUTSIDER", "帮我看看支付服务", "1200.1"))
        await ws.settle()
        assert slack.ephemeral_texts("UOUTSIDER") == [
            "你不在可以使用 OpsPilot 的名单里（`slack.allowed_users` / `slack.allowed_usergroups`）。"]
        await ws.sender.event(mention(CHANNEL, "UREQ", "看看支付服务最近报错", "1300.1"))
        await ws.settle()
        await ws.sender.event(message(CHANNEL, "UREQ", "restart it in prod", "1300.2", thread_ts="1300.1"))
        await ws.settle()
        card = next(m for m in slack.thread(CHANNEL, "1300.1") if any(b["action_id"] == "opspilot_confirm"
                                                                      for b in buttons(m)))
        token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
        await ws.sender.action(block_action(user="UREQ", channel=CHANNEL, message=card, action_id="opspilot_confirm",
                                            value=token))
        await ws.settle()
        assert slack.ephemeral_texts("UREQ")[-1] == \
            "双人规则：发起人不能批准自己在 `prod` 的 `restart_service`。请另一位批准人确认。"
        assert ws.toolbox.restarts.done == []
    finally:
        await ws.stop()


def test_one_earlier_call_is_one() -> None:
    """41 tool calls in a run read "… 1 earlier calls" above the last 40."""
    from bot.slack.outbound.blocks import progress_blocks

    lines = [{"tool": f"t{i}", "status": "ok"} for i in range(41)]
    text = "\n".join(b["text"]["text"] for b in progress_blocks({"lines": lines, "lang": "en"}) if "text" in b)
    assert "… 1 earlier call\n" in text and "calls" not in text.split("\n")[1]


@pytest.mark.parametrize(("text", "lang"), [
    ("看看支付服务最近报错，顺便对照一下文档里的处理建议", "zh"),
    ("why is 支付服务 returning 500s since 10:02? check the logs", "en"),  # a service's Chinese name
    ("Check 支付服务 and 订单服务 errors", "en"),
    ("用kubectl查一下payment-service的pod日志", "zh"),  # Chinese grammar around English names
    ("<@U0WANG> can you check why payments is returning 500s?", "en"),
    ("<https://grafana.example.com/d/abc|看板>", None),  # a link alone says nothing
    (":fire: :fire:", None),
    ("重启", "zh"),
    # Chinese as on-call engineers write it, English names and terms in it (a first version called these English)
    ("api-gateway 502 报错", "zh"), ("重启 payment-service", "zh"), ("redis OOM 告警", "zh"),
    ("prod 数据库 CPU 100%", "zh"), ("帮我 check 一下 payments 的错误", "zh"),
    # English naming something in Chinese, whatever characters the name holds (在, 看, 我, 为 are in names too)
    ("why is 在线支付 returning 500s?", "en"), ("is 看板 down?", "en"), ("restart 我的订单 service", "en"),
    ("ask 王为民 about the deploy", "en"), ("ok", "en"), ("好的", "zh"),
    # Chinese grammar with an English ops word or a pasted English error in it (the second version called these
    # English), and a name's parts never counted as words ("us-east-1" holds no "us")
    ("api-gateway 又 down 了", "zh"), ("帮我 rollback 一下 payments", "zh"), ("能 rollback 吗", "zh"),
    ("payments 的 deploy 失败了", "zh"), ("orders 需要 scale up 吗", "zh"), ("i-0abc123def 挂了", "zh"),
    ("us-east-1 的 payment-service 报错了", "zh"),
    ("帮我看下这个报错 ConnectionError: could not connect to the database at db-1, the pool is exhausted", "zh"),
    ("is 支付服务 down again?", "en"), ("502", None),
    # What the asker quotes is data, not their words: an English question quoting a Chinese error or message was
    # Chinese (its particle weighed as theirs); a Chinese one quoting English stays Chinese; a quote alone speaks.
    ('Why is checkout failing for payments? Users see this: "支付失败了，请稍后重试"', "en"),
    ("what does this mean?\n&gt; 支付回调失败了吗", "en"), ("what does “订单超时了” mean?", "en"),
    ('支付服务报 "connection refused" 怎么回事', "zh"), ('"支付失败了"', "zh"),
    # ... but a name or a number beside a quote says no language: the quote speaks (the review)
    ("order-service 「一直在重启」", "zh"), ("api-gateway “502 报错”", "zh"), ('"支付服务挂了" 502', "zh"),
    ("&gt; 支付服务连接数据库超时\n+1", "zh"),
    # A log pasted after "log:" / "this:", or a log line (a level or a date first), is data too: these English
    # questions started Chinese threads (the probe)
    ("why is checkout failing for payments? log: 支付回调失败，订单状态未更新，请人工核对", "en"),
    ("payments is throwing this:\n2026-12-07 10:01:02 ERROR 数据库连接池已耗尽，等待超时 3000ms", "en"),
    ("error: 支付失败了怎么办", "zh"), ("日志: ERROR timeout 帮我看看", "zh"),
    # Names alone speak no language (a Chinese person's "payments 502" started an English thread): theirs goes
    ("payments 502", None), ("OOM", None), ("api-gateway", None), ("payments down", "en"),
    # A command word alone is English ("help" from a person whose threads are Chinese got Chinese), but it tips no
    # Chinese message naming it; Traditional Chinese asks with 幫我 as Simplified does with 帮我
    ("help", "en"), ("status?", "en"), ("stop", "en"), ("cancel", "en"), ("payments status", None),
    # ... and a command word in a pasted log or alert line is data: a Chinese person's paste started English threads
    ("ERROR payments-api upstream status=503", None), ("[FIRING:1] HighErrorRate payments-api status=critical", None),
    ("HTTP 503 stop", None), ("payments-api retry 502", None),
    ("payments status 异常", "zh"), ("api-gateway stop 了", "zh"), ("幫我 check payments", "zh"),
])
def test_the_language_of_a_question_is_that_of_its_own_words(text: str, lang: str | None) -> None:
    assert signal(text) == lang


async def test_a_new_thread_speaks_its_asker_s_words_or_else_their_latest_thread_s(ws: Workspace) -> None:
    """An English question naming a colleague whose Slack name is Chinese got a Chinese thread (the name was
    weighed as the question's words); a question that was only a link got English for good from a person whose
    threads are Chinese, as did `/opspilot handover` (no words of its own)."""
    ws.slack.profiles["UWANG"] = "王伟"
    await ws.sender.event(mention(CHANNEL, "UREQ", "can <@UWANG> and you check why payments is failing?", "1400.1"))
    await ws.settle()
    english = "\n".join(all_text(m) for m in ws.slack.thread(CHANNEL, "1400.1"))
    assert ":white_check_mark: Done" in english and "完成" not in english and "以上结论" not in english, english
    await ws.sender.event(mention(CHANNEL, "UZH", "看看支付服务最近报错", "1500.1"))
    await ws.settle()
    await ws.sender.event(mention(CHANNEL, "UZH", "<https://grafana.example.com/d/abc>", "1600.1"))
    await ws.settle()
    linked = "\n".join(all_text(m) for m in ws.slack.thread(CHANNEL, "1600.1"))
    assert ":white_check_mark: 完成" in linked and "Done" not in linked, linked
    await ws.sender.command({"command": "/opspilot", "text": "handover", "user_id": "UZH", "channel_id": CHANNEL,
                             "trigger_id": "ho-1", "response_url": "https://hooks.slack.test/c"})
    await ws.settle()
    roots = "\n".join(all_text(m) for (c, _), m in ws.slack.messages.items() if c == CHANNEL
                      and m.get("thread_ts") is None)
    assert f"交接：<#{CHANNEL}>" in roots and "Handover:" not in roots, roots


@pytest.mark.parametrize(("question", "said"), [("help", "I'm OpsPilot"), ("幫助", "我是 OpsPilot"),
                                                ("幫我", "我是 OpsPilot"), ("帮助", "我是 OpsPilot")])
async def test_help_is_answered_in_the_language_it_was_asked_in(ws: Workspace, question: str, said: str) -> None:
    """"help" from a person whose last thread was Chinese was answered in Chinese; 幫助 (Traditional) was taken
    for a question about a service."""
    await ws.sender.event(mention(CHANNEL, "UZH", "看看支付服务最近报错", "1700.1"))
    await ws.settle()
    await ws.sender.event(mention(CHANNEL, "UZH", question, "1800.1"))
    await ws.settle()
    answer = all_text(ws.slack.thread(CHANNEL, "1800.1")[-1])
    assert said in answer and "search_resource" not in answer, answer


async def _investigated(ws: Workspace, trigger: str) -> dict[str, Any]:
    """UWANG's "Investigate with OpsPilot" on ULI's Chinese error report."""
    posted = ws.slack.post_as_user(CHANNEL, "ULI", "订单服务从 10:02 开始一直报 500，怎么回事？")
    await ws.sender.action({"type": "message_action", "callback_id": "opspilot_investigate_message",
                            "trigger_id": trigger, "team": {"id": "T0001"}, "user": {"id": "UWANG"},
                            "channel": {"id": CHANNEL}, "message": {k: posted[k] for k in ("ts", "text", "user")},
                            "response_url": "https://hooks.slack.test/r"})
    await ws.settle()
    return posted


async def test_the_investigate_shortcut_speaks_the_message_s_language(ws: Workspace) -> None:
    """"Investigate with OpsPilot" on a colleague's Chinese error report started an English thread: the run's
    question is OpsPilot's own template (English), read as if the person had typed it."""
    posted = await _investigated(ws, "5.5")
    shown = "\n".join(all_text(m) for m in ws.slack.thread(CHANNEL, posted["ts"]) if m.get("bot"))
    assert ":white_check_mark: 完成" in shown and "Done" not in shown, shown


def test_why_a_run_failed_is_said_in_the_thread_s_language() -> None:
    """A Chinese thread's answer read "模型出错，已停止 —— `the model service is rate limiting us; try again shortly`":
    OpsPilot's own English reason, quoted."""
    from bot.agent.fallback import Fallback
    from bot.slack.outbound.outputs import fallback_answer

    def said(why: str, code: str, lang: str) -> str:
        return fallback_answer(Fallback(kind="failed", reason="model_error", why=why, code=code), lang)

    assert "模型服务正在限流" in said("the model service is rate limiting us; try again shortly", "rate_limited", "zh")
    assert "模型服务返回了 HTTP `503`" in said("the model service answered with HTTP 503", "api_error", "zh")
    assert "发生了内部错误（编号 `ab12cd34`）" in said("an internal error occurred (ref ab12cd34)", "internal_error",
                                                    "zh")
    assert "the model service answered with HTTP `503`" in said("the model service answered with HTTP 503",
                                                                  "api_error", "en")
    assert "`something else`" in said("something else", "", "zh")  # a reason OpsPilot does not word: quoted


async def test_the_investigate_shortcut_s_question_is_shown_in_the_thread_s_language(ws: Workspace) -> None:
    """The shortcut's composed question was English whatever the thread spoke: a Chinese thread's handover (and
    App Home) showed "@Rita asked me to investigate the message quoted above…"."""
    await _investigated(ws, "5.6")
    await ws.sender.command({"command": "/opspilot", "text": "handover", "user_id": "UWANG", "channel_id": CHANNEL,
                             "team_id": "T0001", "trigger_id": "9.6", "response_url": "https://hooks.slack.test/r"})
    await ws.settle()
    handover = next(all_text(m) for (c, _), m in ws.slack.messages.items()
                    if c == CHANNEL and f"<#{CHANNEL}>" in all_text(m))  # (the handover: in its asker's language)
    assert "请我调查上面引用的消息" in handover and "asked me to investigate" not in handover, handover
