"""A click's receipt on its card (bot/slack/inbound/receipt.py), against the local Slack's response URLs: shown only
when recording the decision is slow, landing before the outcome however slowly Slack answers it, and put back when
the decision was never recorded."""

from __future__ import annotations

import asyncio

from bot.demo.workspace import LocalSlack, all_text, buttons
from bot.slack.inbound.receipt import Receipt
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.change_card import confirm_card
from bot.slack.outbound.responses import post_response
from state import RedisStore, connect
from state.meta_store import MemoryMeta
from state.store_errors import StoreUnavailable
from tests.conftest import free_port, until


def _card(slack: LocalSlack) -> dict:
    blocks = confirm_card("tok-1", "restarts payments", {"tool": "restart_service", "target": "payments",
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


async def test_queued_but_not_read_while_redis_is_away_the_front_shows_the_receipt(slack: LocalSlack) -> None:
    """The front queued the decision, then Redis went away before a worker read it: nobody is recording it, so
    nobody else would say the click arrived. The front does, once the card has not closed in time."""
    card = _card(slack)
    away = RedisStore(connect(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2), outage_grace_s=0.2)
    receipt = Receipt(slack.response_url("C1", card["ts"]), card, "UBOB", "opspilot_confirm", after_s=0.05)
    await receipt.hold()  # the decision is queued at once: the front's own wait is over
    receipt.follow(away.meta, "tok-1", grace_s=1.0)
    await until(lambda: ":inbox_tray:" in all_text(slack.messages[("C1", card["ts"])]), 10)
    assert buttons(slack.messages[("C1", card["ts"])]) == []
    await away.close()


class _Record(MemoryMeta):
    """The card's record as the front reads it: the store away for the first ``away`` looks, then what ``then``
    says, one look each (the last one from then on)."""

    def __init__(self, away: int, *then: dict[str, str]) -> None:
        super().__init__()
        self.away, self.then, self.looks = away, list(then), 0

    async def get(self, kind: str, key: str) -> dict[str, str]:
        self.looks += 1
        if self.looks <= self.away:
            raise StoreUnavailable("Redis unreachable")
        return self.then[min(self.looks - self.away, len(self.then)) - 1]


_DECIDED = {"decided": "Confirmed by <@UBOB>", "summary": "*Confirmation* — restart payments"}


async def test_a_close_that_landed_before_the_receipt_is_put_back_on_top(slack: LocalSlack) -> None:
    """The worker closed the card just before the store went away, and the receipt landed after its close: once
    the store answers, the close goes back on top."""
    card = _card(slack)
    receipt = Receipt(slack.response_url("C1", card["ts"]), card, "UBOB", "opspilot_confirm", after_s=0.05)
    await receipt.hold()
    record = _Record(2, _DECIDED)
    receipt.follow(record, "tok-1", grace_s=10.0)
    await until(lambda: record.looks >= 3 and len(slack.responses) == 2, 10)
    now = slack.messages[("C1", card["ts"])]
    assert "Confirmed by" in all_text(now) and ":inbox_tray:" not in all_text(now) and buttons(now) == []
    assert [":inbox_tray:" in r["text"] for r in slack.responses] == [True, False]  # the receipt, then the close


async def test_a_card_not_decided_when_the_store_is_back_gets_its_buttons_back(slack: LocalSlack) -> None:
    """Not decided once the store answers: put back as it was (a worker on it closes it after; one that failed, a
    form refused for a bad value, must not leave it without buttons)."""
    card = _card(slack)
    receipt = Receipt(slack.response_url("C1", card["ts"]), card, "UBOB", "opspilot_confirm", after_s=0.05)
    await receipt.hold()
    receipt.follow(_Record(2, {}), "tok-1", grace_s=10.0)
    await until(lambda: len(slack.responses) == 2, 10)
    assert [b["action_id"] for b in buttons(slack.messages[("C1", card["ts"])])] == ["opspilot_confirm",
                                                                                    "opspilot_decline"]


async def test_while_the_store_answers_the_front_shows_no_receipt(slack: LocalSlack) -> None:
    """A worker on it closes the card, or says why not (its form refused, its work failed): a receipt from here
    would hide the buttons with nobody left to bring them back."""
    card = _card(slack)
    receipt = Receipt(slack.response_url("C1", card["ts"]), card, "UBOB", "opspilot_submit", after_s=0.05)
    await receipt.hold()
    record = _Record(0, {})
    receipt.follow(record, "tok-1", grace_s=10.0)
    await until(lambda: record.looks >= 1, 5)
    await asyncio.sleep(0.3)
    assert slack.responses == [] and buttons(slack.messages[("C1", card["ts"])])


async def test_a_close_sent_while_the_card_was_put_back_stays_on_top(slack: LocalSlack) -> None:
    """Not decided at the look, decided just after (its close may land before our put-back): looked at again once
    ours is in, the close goes back on top — the soak's small run once ended with a closed card showing Confirm."""
    card = _card(slack)
    receipt = Receipt(slack.response_url("C1", card["ts"]), card, "UBOB", "opspilot_confirm", after_s=0.05)
    await receipt.hold()
    receipt.follow(_Record(2, {}, _DECIDED), "tok-1", grace_s=10.0)
    await until(lambda: len(slack.responses) == 3, 10)
    now = slack.messages[("C1", card["ts"])]
    assert "Confirmed by" in all_text(now) and buttons(now) == []


async def test_a_click_not_recorded_puts_its_card_back_then_looks_again(slack: LocalSlack) -> None:
    """A click not recorded (refused, or the store away past its grace) puts the card back as it was; another
    person's click decided it meanwhile, its close landing before our put-back: looked at once more, the close goes
    back on top instead of a Confirm button for a decision already made."""
    card = _card(slack)
    receipt = Receipt(slack.response_url("C1", card["ts"]), card, "UBOB", "opspilot_confirm", after_s=0.05)
    await until(lambda: receipt.shown, 5)
    await receipt.settle(False, _Record(0, _DECIDED), "tok-1")
    now = slack.messages[("C1", card["ts"])]
    assert "Confirmed by" in all_text(now) and buttons(now) == []
    assert [":inbox_tray:" in r["text"] for r in slack.responses] == [True, False, False]  # receipt, back, close
