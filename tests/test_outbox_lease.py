"""A thread's delivery lease across a Redis outage longer than the lease: the instance that held it must not post
after another one may have taken the thread (the issue-scale soak saw a Confirm card posted twice, 3 s apart)."""

from __future__ import annotations

import asyncio
import time

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bench.common import server_sample
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.counters import Metrics
from bot.slack.outbound.hold import Hold, LeaseLost
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.pacer import Pacer
from state import Keys, RedisStore, connect
from tests.conftest import OwnRedis, until

THREAD_TS = "40.1"


def _outbox(store: RedisStore, slack: FakeSlack, posts_per_second: float) -> SlackOutbox:
    # Pacing in process: the wait for a post's turn is what outlasts the lease, and it must not need Redis.
    return SlackOutbox(store=store.outbox, pacer=Pacer(posts_per_second=posts_per_second, post_burst=1),
                       client=AsyncWebClient(token=slack.token, base_url=slack.api_url, timeout=1),
                       metrics=Metrics(), poll_s=0.1, lease_s=3.0)


def _store(own_redis: OwnRedis, prefix: str) -> RedisStore:
    return RedisStore(connect(own_redis.url, timeout_s=0.5), keys=Keys(prefix), outage_grace_s=0.0)


async def test_a_deliverer_whose_lease_lapsed_in_an_outage_does_not_post_what_another_posted(
        own_redis: OwnRedis, prefix: str, slack: FakeSlack) -> None:
    """A posts the first message, then waits (Slack's pace, 0.1 post/s) to post the second; Redis goes away for
    longer than the lease, so when it is back B takes the thread and posts the second message. A's wait ends
    after that: it must find its lease no longer sure, and stop. Each message is in Slack once."""
    a_store, b_store = _store(own_redis, prefix), _store(own_redis, prefix)
    a = _outbox(a_store, slack, posts_per_second=0.1)
    b = _outbox(b_store, slack, posts_per_second=50)
    try:
        for n in (1, 2):
            await a.message(f"answer:r1:{n}", "C1", THREAD_TS, f"part {n}", [kit.mrkdwn(f"part {n}")])
        a.start()
        await until(lambda: len(slack.called("chat.postMessage")) == 1, 10)
        a_turn = time.monotonic() + 10  # when A's wait for the second post's turn ends
        await asyncio.sleep(0.3)  # A is in its wait for the second post's turn
        own_redis.stop()
        await asyncio.sleep(a.lease_s + 0.5)  # longer than the lease: it lapses in Redis whatever A believes
        own_redis.start()
        b.start()
        await until(lambda: len(slack.called("chat.postMessage")) >= 2, 10)
        await asyncio.sleep(max(0.0, a_turn - time.monotonic()) + 1.0)  # A's turn has come and gone
        keys = [call["metadata"]["event_payload"]["key"] for call in slack.called("chat.postMessage")]
        assert sorted(keys) == ["answer:r1:1", "answer:r1:2"], keys
        assert len([m for m in slack.thread("C1", THREAD_TS) if m.get("bot")]) == 2
    finally:
        for outbox in (a, b):
            await outbox.stop()
        for store in (a_store, b_store):
            await store.close()


def test_a_hold_is_sure_only_while_a_call_starting_now_ends_inside_the_lease() -> None:
    hold = Hold(Hold.lease_for(1.0, 3.0), 1.0)
    assert hold.lease_s == 4.0 and 0 < hold.renew_every_s < 1
    hold.check()  # just renewed
    hold.renewed_at = time.monotonic() - 2.1  # a call of 1 s (+1 s margin) would end past the lease
    with pytest.raises(LeaseLost):
        hold.check()
    hold.renewed(time.monotonic(), held=True)
    hold.check()
    hold.renewed(time.monotonic(), held=False)  # someone else has it
    with pytest.raises(LeaseLost, match="another instance"):
        hold.check()


async def test_a_round_s_bookkeeping_is_one_script_after_its_sends(own_redis: OwnRedis, prefix: str,
                                                                   slack: FakeSlack) -> None:
    """A round that edits a message saves what Slack took with its settle: one script after the edit (the patch
    of each sent version was a script of its own). The edit is saved: the next state edits the same message."""
    store = _store(own_redis, prefix)
    outbox = SlackOutbox(store=store.outbox, pacer=Pacer(posts_per_second=50),
                         client=AsyncWebClient(token=slack.token, base_url=slack.api_url, timeout=1),
                         metrics=Metrics(), update_interval_s=0.0)  # the edit goes at once: one round
    try:
        await outbox.message("progress:r1", "C1", THREAD_TS, "step 1", [kit.mrkdwn("step 1")])
        await outbox.drain(10)
        await outbox.message("progress:r1", "C1", THREAD_TS, "step 2", [kit.mrkdwn("step 2")])
        before = await server_sample(own_redis.url)
        await outbox.drain(10)
        calls = (await server_sample(own_redis.url)).since(before).calls
        assert calls["evalsha"] == 1 and calls["hset"] == 1, calls  # the settle, saving the edit
        (record,) = await store.outbox.records(f"C1:{THREAD_TS}")
        assert not record.dirty and record.get("text") is None and record.get("ts")
        assert len(slack.called("chat.postMessage")) == 1 and len(slack.called("chat.update")) == 1
    finally:
        await outbox.stop()
        await store.close()
