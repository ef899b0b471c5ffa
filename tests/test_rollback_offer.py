"""The "Roll back to <previous release>" offer, through the real app: shown under an answer whose run found the
errors began right after a deploy (the same rule as the answer's verdict), never where they began before it;
pressing it goes through the normal confirmation card (from → to), and the rollback runs once."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator

import pytest

from bot.demo.sender import block_action, mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.slack.rollbacks.offer import ROLLBACK
from tests.slack_harness import CHANNEL, Workspace, open_workspace


@pytest.fixture
async def ws(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[Workspace]:
    workspace = await open_workspace(redis_url, prefix, slack, language="auto")
    yield workspace
    await workspace.stop()


def _offers(ws: Workspace, ts: str) -> list[tuple[dict[str, object], dict[str, object]]]:
    return [(m, b) for m in ws.slack.thread(CHANNEL, ts) for b in buttons(m) if b["action_id"] == ROLLBACK]


async def _press(ws: Workspace, message: dict[str, object], button: dict[str, object], user: str = "UREQ") -> None:
    await ws.sender.action(block_action(user=user, channel=CHANNEL, message=copy.deepcopy(message),
                                        action_id=ROLLBACK, value=str(button["value"])))
    await ws.settle()


@pytest.mark.parametrize(("question", "label", "reason"), [
    ("was it the deploy that broke orders in staging?", "Roll back to 2026.12.01-4",
     "reason=`roll back orders in staging to release 2026.12.01-4`"),
    ("订单服务 staging 的报错是发布引起的吗？", "回滚到 2026.12.01-4",
     "reason=`把 orders（staging）回滚到版本 2026.12.01-4`"),
])
async def test_a_yes_verdict_offers_the_previous_release_and_the_card_gates_it(ws: Workspace, question: str,
                                                                             label: str, reason: str) -> None:
    await ws.sender.event(mention(CHANNEL, "UREQ", question, "800.1"))
    await ws.settle()
    [(answer, button)] = _offers(ws, "800.1")
    assert button["text"]["text"] == label  # type: ignore[index]
    assert json.loads(str(button["value"]))["release"] == "2026.12.01-4"
    assert ws.toolbox.rollbacks.done == []  # an offer does nothing by itself

    await _press(ws, answer, button)
    card = next(m for m in ws.slack.thread(CHANNEL, "800.1") if any(
        b["action_id"] == "opspilot_confirm" for b in buttons(m)))
    text = all_text(card)
    assert "`2026.12.02-1` → `2026.12.01-4`" in text, text  # from → to, before anyone confirms
    assert reason in text, text  # the request in the thread's words, not "<@U…> pressed …" (a raw id in a code span)
    assert ws.toolbox.rollbacks.done == []
    token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
    for _ in range(2):  # a double click acts once
        await ws.sender.action(block_action(user="UAPPROVER", channel=CHANNEL, message=copy.deepcopy(card),
                                            action_id="opspilot_confirm", value=token))
    await ws.settle()
    assert len(ws.toolbox.rollbacks.done) == 1
    assert ws.toolbox.rollbacks.done[0]["to_release"] == "2026.12.01-4"
    # the audit line says what now runs, not only the request (a default rollback names no release at all)
    [line] = [line for m in ws.slack.thread(CHANNEL, "800.1") for line in all_text(m).splitlines()
              if line.startswith("• ") and "`rollback_service`" in line and "<@UAPPROVER>" in line]
    assert "`orders staging: 2026.12.02-1 (orders-api:4.2.0) → 2026.12.01-4 (orders-api:4.1.9)`" in line, line


async def test_errors_before_the_deploy_offer_no_rollback(ws: Workspace) -> None:
    await ws.sender.event(mention(CHANNEL, "UREQ", "did the last deploy cause the payments errors in prod?", "810.1"))
    await ws.settle()
    assert "No: the errors began 8 min before 2026.12.02-2" in all_text(ws.slack.thread(CHANNEL, "810.1")[-1])
    assert _offers(ws, "810.1") == []


async def test_a_forged_or_lifted_offer_is_refused(ws: Workspace) -> None:
    await ws.sender.event(mention(CHANNEL, "UREQ", "was it the deploy that broke orders in staging?", "820.1"))
    await ws.sender.event(mention(CHANNEL, "UREQ", "look at the payment service's recent errors", "830.1"))
    await ws.settle()
    [(answer, button)] = _offers(ws, "820.1")
    elsewhere = ws.slack.thread(CHANNEL, "830.1")[-1]  # the button's value pressed on another thread's message
    await _press(ws, elsewhere, button)
    await _press(ws, answer, {"value": "{not json"})
    assert not any(b["action_id"] == "opspilot_confirm" for ts in ("820.1", "830.1")
                   for m in ws.slack.thread(CHANNEL, ts) for b in buttons(m))
    assert ws.toolbox.rollbacks.done == []


async def test_a_double_press_asks_once_and_the_offer_gives_its_button_up(ws: Workspace) -> None:
    """Two presses a moment apart (a double click): the second asked again, set the first one's card aside
    ("Answered in the thread instead") and made a second card; the button stayed under the answer for good."""
    import asyncio

    await ws.sender.event(mention(CHANNEL, "UREQ", "was it the deploy that broke orders in staging?", "801.1"))
    await ws.settle()
    [(answer, button)] = _offers(ws, "801.1")
    presses = [block_action(user=user, channel=CHANNEL, message=copy.deepcopy(answer), action_id=ROLLBACK,
                            value=str(button["value"])) for user in ("UREQ", "UREQ", "UBOB")]
    for n, press in enumerate(presses):
        press["actions"][0]["action_ts"] = str(float(presses[0]["actions"][0]["action_ts"]) + 0.3 * n)
    await asyncio.gather(*(ws.sender.action(p) for p in presses[:2]))
    await ws.settle()
    await ws.sender.action(presses[2])  # a colleague, later, on a client that still showed the button
    await ws.settle()
    thread = ws.slack.thread(CHANNEL, "801.1")
    cards = [m for m in thread if any(b["action_id"] == "opspilot_confirm" for b in buttons(m))]
    assert len(cards) == 1 and not any("Answered in the thread" in all_text(m) for m in thread)
    assert _offers(ws, "801.1") == []  # the answer no longer offers it, and says who asked
    assert any("Rollback to 2026.12.01-4 asked by <@UREQ>" in all_text(m) for m in thread)
    assert any("<@UREQ> already asked for this rollback" in t for t in ws.slack.ephemeral_texts("UBOB"))


async def test_a_press_the_thread_does_not_take_leaves_the_offer_as_it_was(redis_url: str, prefix: str,
                                                                          slack: FakeSlack) -> None:
    """Pressed while the thread's card waits on someone else: the question is not taken, so the answer keeps its
    button and says nobody asked, and a later press is asked again — not told "already asked" for 7 days."""
    from bot.demo.sender import message

    ws = await open_workspace(redis_url, prefix, slack, language="auto",
                              approvers={"restart_service": {"prod": {"users": ["UBOSS"]}}})
    try:
        await ws.sender.event(mention(CHANNEL, "UREQ", "was it the deploy that broke orders in staging?", "802.1"))
        await ws.settle()
        [(answer, button)] = _offers(ws, "802.1")
        await ws.sender.event(message(CHANNEL, "UBOB", "restart orders in prod", "802.5", thread_ts="802.1"))
        await ws.settle()
        await _press(ws, answer, button)
        thread = ws.slack.thread(CHANNEL, "802.1")
        assert len(_offers(ws, "802.1")) == 1  # the button is still there
        assert not any("asked by" in all_text(m) for m in thread)
        assert any("waiting for an answer on its card" in t for t in ws.slack.ephemeral_texts("UREQ"))
        await _press(ws, answer, button, user="UCAROL")  # later: asked (and refused) again, not "already asked"
        carol = ws.slack.ephemeral_texts("UCAROL")
        assert carol and not any("already asked" in t for t in carol)
        assert any("waiting for an answer on its card" in t for t in carol)
    finally:
        await ws.stop()


async def test_a_failure_to_mark_the_offer_taken_does_not_disown_its_question(ws: Workspace) -> None:
    """The question was taken and its card posted; the store failed while the answer's button was being taken
    away: the thread was told "I can't take questions right now … ask again", inviting a second rollback."""
    from bot.slack.inbound.offers import Offers
    from state import StoreError

    class Failing(Offers):
        async def taken(self, item: object, lang: str) -> None:
            raise StoreError("Redis error while reading the outbox: gone")

    executor = ws.service.executor
    assert executor is not None and executor.offers is not None
    executor.offers = Failing(meta=executor.meta, outbox=executor.outbox)
    await ws.sender.event(mention(CHANNEL, "UREQ", "was it the deploy that broke orders in staging?", "803.1"))
    await ws.settle()
    [(answer, button)] = _offers(ws, "803.1")
    await _press(ws, answer, button)
    thread = ws.slack.thread(CHANNEL, "803.1")
    assert any(b["action_id"] == "opspilot_confirm" for m in thread for b in buttons(m))
    assert not any("state store is unavailable" in all_text(m) for m in thread)


async def test_a_question_given_up_before_its_thread_took_it_frees_its_offer(ws: Workspace) -> None:
    """Every try failed before the turn began: the offer stayed claimed for 7 days ("already asked")."""
    from bot.slack.inbound.work_items import Converse, Offered

    executor = ws.service.executor
    assert executor is not None
    claim, holder = "rollback-offer:C1:804.1:r1", "rollback:C1:804.1:UREQ:1.0"
    assert await executor.meta.claim(claim, holder, 3600) == holder
    item = Converse(channel=CHANNEL, thread_ts="804.1", user="UREQ", text="roll back", request_id=holder,
                    offered=Offered(claim=claim, holder=holder, run="r1", release="2026.12.01-4"))
    await executor.give_up(item, "ref1")
    assert await executor.meta.claim(claim, "someone-else", 3600) == "someone-else"


_CHANGES = {"service_id": "orders", "environment": "prod", "changes": [
    {"at": "2026-12-02T09:40:00Z", "kind": "deploy", "version": "2026.12.02-1", "source": "ci"},
    {"at": "2026-12-02T08:00:00Z", "kind": "deploy", "version": "2026.12.01-4", "source": "ci"}]}
_RATE = {"onset_at": "2026-12-02T09:50:00Z", "peak": 0.05, "trend": "rising", "points": 30,
         "first_point_at": "2026-12-02T09:00:00Z", "step_s": 60}


def _offered(rate: dict[str, object]) -> object:
    from bot.agent.events import ToolResultEvent
    from bot.slack.rollbacks.offer import offer, remember

    state: dict[str, object] = {}
    for i, (tool, data) in enumerate((("recent_changes", _CHANGES), ("query_metrics", {
            "service_id": "orders", "environment": "prod", "metrics": {"error_rate": rate}}))):
        remember(state, ToolResultEvent(run_id="r", thread_id="t", seq=i, step=1, call_id=f"c{i}", tool=tool,
                                        status="ok", error_code=None, summary="", latency_ms=1.0,
                                        data={"ok": True, "data": data}))
    return offer(state, "r", "en")


@pytest.mark.parametrize("blind", [{"first_point_at": "2026-12-02T09:45:00Z"},  # the rate before the deploy unread
                                   {"step_s": 900},  # the deploy within the onset's one step: order not known
                                   {"onset_after_gap": True}])  # the errors began somewhere in a gap
def test_the_button_is_offered_only_where_the_answer_s_verdict_is_yes(blind: dict[str, object]) -> None:
    """The offer kept only some of the rate's figures: where the answer said "can't tell" (the metric blind to
    when the errors began), the button still offered "Roll back to …"."""
    from tools.ops.verdict import judge

    assert judge(_CHANGES, _RATE, None).kind == "yes" and _offered(_RATE) is not None
    assert judge(_CHANGES, {**_RATE, **blind}, None).kind != "yes"  # what the answer says
    assert _offered({**_RATE, **blind}) is None


def test_every_rate_figure_the_verdict_reads_is_one_the_offer_keeps() -> None:
    import re
    from pathlib import Path

    from tools.ops import verdict

    read = set(re.findall(r'rate(?: or \{\})?\)?\.get\("(\w+)"\)', Path(verdict.__file__).read_text(encoding="utf-8")))
    assert read and read <= set(verdict.RATE_FIGURES), read - set(verdict.RATE_FIGURES)
