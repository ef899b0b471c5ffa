"""The scripted demo model off its script, in both languages, through the real app: it never answers a
different service than asked, never shows an empty section, and goes straight to the card for a direct
restart."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from tests.slack_harness import CHANNEL, Workspace, open_workspace


@pytest.fixture
async def ws(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[Workspace]:
    workspace = await open_workspace(redis_url, prefix, slack, language="auto")  # each thread in its language
    yield workspace
    await workspace.stop()


async def ask(ws: Workspace, text: str, ts: str) -> str:
    await ws.sender.event(mention(CHANNEL, "UREQ", text, ts))
    await ws.settle()
    return all_text(ws.slack.thread(CHANNEL, ts)[-1])


@pytest.mark.parametrize(("question", "expected", "absent"), [
    ("", ["I'm OpsPilot", "restart payments in prod"], ["search_resource"]),
    ("你好", ["我是 OpsPilot", "看看支付服务最近报错"], ["search_resource"]),
    ("why is checkout slow?", ["There is no service named `checkout`", "Known services: payments, orders, gateway"],
     ["Payment Service", "Runbook advice", "failed"]),
    ("看看 billing-ledger 服务最近报错",
     ["服务目录里没有名为 `billing-ledger` 的服务", "已知的服务：payments, orders, gateway"], ["API Gateway"]),
    ("check paymnets errors", ["no service named `paymnets`", "Did you mean Payment Service (payments)?"], []),
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
