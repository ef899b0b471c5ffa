"""A click's receipt on its card (bot/slack/inbound/receipt.py), against the local Slack's response URLs: shown only
when recording the decision is slow, landing before the outcome however slowly Slack answers it, and put back when
the decision was never recorded."""

from __future__ import annotations

import asyncio

from bot.demo.workspace import LocalSlack, all_text, buttons
from bot.slack.inbound.receipt import Receipt
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.responses import post_response
from tests.conftest import until


def _card(slack: LocalSlack) -> dict:
    blocks = kit.confirm_card("tok-1", "restarts payments", {"tool": "restart_service", "target": "payments",
                                                             "environment": "prod"})
    answer = slack._chat_postMessage({"channel": "C1", "text": "Confirmation needed", "blocks": blocks})
    return dict(answer["message"])


async def test_a_fast_decision_shows_no_receipt(slack: LocalSlack) -> None:
    card = _card(slack)
    receipt = Receipt(slack.response_url("C1", card["ts"]), card, "UBOB", "opspilot_confirm", after_s=0.5)
    await receipt.settle(True)
    await asyncio.sleep(0.6)
    assert slack.responses == [] and not receipt.shown


async def test_the_outcome_lands_after_a_receipt_slack_was_slow_to_take(slack: LocalSlack) -> None:
    card = _card(slack)
    url = slack.response_url("C1", card["ts"])
    slack.fault("hang", "response_url", times=1, hang_s=1.0)  # the receipt's first try hangs, then fails: retried
    receipt = Receipt(url, card, "UBOB", "confirm", after_s=0.05, token="tok-1")
    await until(lambda: receipt.shown, 5)
    waiting = Receipt.of("tok-1")
    assert waiting is receipt
    await waiting.hold()  # what render.close_card does: the receipt is in, whatever it took
    assert ":inbox_tray:" in all_text(slack.messages[("C1", card["ts"])])
    await post_response(url, {"replace_original": True, "text": "Confirmed by <@UBOB>",
                              "blocks": kit.decided_card("restart payments", "Confirmed by <@UBOB>")})
    await receipt.settle(True)
    now = slack.messages[("C1", card["ts"])]
    assert "Confirmed by" in all_text(now) and ":inbox_tray:" not in all_text(now) and buttons(now) == []
    assert Receipt.of("tok-1") is None


async def test_a_decision_never_recorded_gets_the_card_back(slack: LocalSlack) -> None:
    card = _card(slack)
    receipt = Receipt(slack.response_url("C1", card["ts"]), card, "UBOB", "opspilot_confirm", after_s=0.05)
    await until(lambda: ":inbox_tray:" in all_text(slack.messages[("C1", card["ts"])]), 5)
    assert buttons(slack.messages[("C1", card["ts"])]) == []
    await receipt.settle(False)
    back = slack.messages[("C1", card["ts"])]
    assert [b["action_id"] for b in buttons(back)] == ["opspilot_confirm", "opspilot_decline"]
