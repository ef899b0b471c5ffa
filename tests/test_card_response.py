"""A clicked card closes through the click's own response URL (Slack's way to answer an interaction, outside
chat.update's Tier 3 budget that every progress edit in the workspace shares): at the soak's load the cards
otherwise queued behind each other's edits and kept their Confirm button for seconds after the click. A URL that
cannot serve (used, expired, failing) falls back to chat.update, and the card closes all the same."""

from __future__ import annotations

import asyncio

import pytest

from bot.demo.sender import block_action
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text, buttons
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.counters import Metrics
from bot.slack.outbound.streams import Streams
from state import RedisStore
from tests.conftest import until
from tests.slack_harness import CHANNEL, Workspace, ask_restart
from tests.test_pacer import _outbox, _say, _ts


def _click(slack: FakeSlack, card: dict, user: str = "UAPPROVER", *, url: bool = True) -> dict:
    token = next(b["value"] for b in buttons(card) if b["action_id"] == "opspilot_confirm")
    return block_action(user=user, channel=CHANNEL, message=card, action_id="opspilot_confirm", value=token,
                        response_url=slack.response_url(CHANNEL, card["ts"]) if url else "")


def _closed(slack: FakeSlack, card: dict) -> bool:
    now = slack.messages[(CHANNEL, card["ts"])]
    return not buttons(now) and "Confirmed by" in all_text(now)


async def test_a_card_closes_through_its_response_url_while_chat_update_is_refused(ws: Workspace) -> None:
    card = await ask_restart(ws, thread="300.1")
    limited = ws.slack.fault("limited", "chat.update")  # every edit answers 429: the budget is spent
    status, _ = await ws.sender.action(_click(ws.slack, card))
    assert status == 200
    await until(lambda: _closed(ws.slack, card), 20)
    edit = ws.slack.responses[-1]
    assert edit["replace_original"] is True and "Confirmed by" in edit["text"]
    limited.until = 0.0
    await ws.settle()
    assert len(ws.toolbox.restarts.done) == 1


@pytest.mark.parametrize("kind", ["error", "refuse"])
async def test_a_response_url_that_cannot_serve_falls_back_to_chat_update(ws: Workspace, kind: str) -> None:
    """Failing (5xx: three tries) or refused for good (404 used_url: at once): chat.update closes the card."""
    card = await ask_restart(ws, thread="301.1")
    ws.slack.fault(kind, "response_url", error="used_url")
    before = len(ws.slack.called("chat.update"))
    await ws.sender.action(_click(ws.slack, card))
    await ws.settle()
    assert _closed(ws.slack, card) and ws.slack.responses == []
    assert any(u["ts"] == card["ts"] for u in ws.slack.called("chat.update")[before:])
    assert len(ws.toolbox.restarts.done) == 1


async def test_a_click_without_a_response_url_closes_its_card_as_before(ws: Workspace) -> None:
    card = await ask_restart(ws, thread="302.1")
    await ws.sender.action(_click(ws.slack, card, url=False))
    await ws.settle()
    assert _closed(ws.slack, card) and ws.slack.responses == []


async def test_a_card_closes_while_its_threads_stream_keeps_failing(store: RedisStore, slack: FakeSlack) -> None:
    """The run's progress, streamed, meets Slack's failures and backs off (up to half a minute); a card edited
    through its click's response URL does not wait behind it (the soak's slowest cards did: 20–39 s)."""
    outbox = _outbox(store, slack, posts_per_second=50, updates_per_minute=600)
    outbox.sender.streams = outbox.streams = Streams(client=outbox.client, pacer=outbox.pacer, metrics=Metrics(),
                                                     mode="stream")
    task = {"id": "c1", "title": "search_docs", "status": "in_progress"}
    slack.post_as_user("C1", "UREQ", "how is payments?", ts="9.1")  # the thread the run streams in
    try:
        await outbox.stream("progress:r1", "C1", "9.1", recipient="UREQ", text="step 1", blocks=[kit.mrkdwn("1")],
                            tasks=[task])
        await _say(outbox, "card:t1", "C1", "9.1", "Confirm restarting payments?")
        await until(lambda: bool(slack.called("chat.startStream")) and len(slack.called("chat.postMessage")) == 1)
        card_ts = str(await _ts(store, "C1:9.1", "card:t1"))
        slack.fault("error", "chat.appendStream")
        await outbox.stream("progress:r1", "C1", "9.1", recipient="UREQ", text="step 2", blocks=[kit.mrkdwn("2")],
                            tasks=[{**task, "status": "complete"}])
        await until(lambda: len(slack.called("chat.appendStream")) >= 3, 20)  # failing, and backing off
        decided = kit.decided_card("restart payments", "Confirmed by <@UBOB>")
        await outbox.message("card:t1", "C1", "9.1", "Confirmed by <@UBOB>", decided,
                             response_url=slack.response_url("C1", card_ts))
        await until(lambda: "Confirmed by" in all_text(slack.messages[("C1", card_ts)]), 10)
    finally:
        await outbox.stop()


async def test_a_card_closes_at_once_though_a_dead_process_holds_its_thread(store: RedisStore,
                                                                            slack: FakeSlack) -> None:
    """The process that delivered the thread was killed holding its outbox lease (20 s): the clicked card is edited
    at once by whoever closes it, through its response URL, and its record is marked sent."""
    outbox = _outbox(store, slack, posts_per_second=50, updates_per_minute=600)
    try:
        await _say(outbox, "card:t1", "C1", "9.1", "Confirm restarting payments?")
        await until(lambda: len(slack.called("chat.postMessage")) == 1)
        card_ts = str(await _ts(store, "C1:9.1", "card:t1"))
        assert await store.outbox.lease("C1:9.1", "a-process-killed-9", 20_000)
        decided = kit.decided_card("restart payments", "Confirmed by <@UBOB>")
        await outbox.message("card:t1", "C1", "9.1", "Confirmed by <@UBOB>", decided,
                             response_url=slack.response_url("C1", card_ts))
        await until(lambda: "Confirmed by" in all_text(slack.messages[("C1", card_ts)]), 5)
        await until(lambda: len(slack.responses) == 1, 5)
        for _ in range(200):  # its record is marked sent just after the edit lands: wait for that, not a budget
            dirty = [r for r in await store.outbox.records("C1:9.1") if r.dirty]
            if not dirty:
                break
            await asyncio.sleep(0.05)
        assert not dirty  # nothing left to send
    finally:
        await outbox.stop()
