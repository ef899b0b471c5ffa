"""The durable Slack outbox through the real app: Slack failing, hanging, rate limiting or losing answers,
and every answer and final progress state still arriving exactly once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.demo.sender import mention
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.demo.workspace import all_text
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.counters import Metrics
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.pacer import Pacer
from state import MemoryStore, RedisStore
from state.keys import shard_of
from state.outbox_store import OutboxRecord, RedisOutbox
from tests.conftest import until
from tests.slack_harness import CHANNEL, QUESTION, Workspace, open_workspace

ANSWER_MARK = "docs/payments-db-timeouts.md"


@pytest.fixture
async def ws(redis_url: str, prefix: str, slack: FakeSlack) -> AsyncIterator[Workspace]:
    workspace = await open_workspace(redis_url, prefix, slack, request_timeout_s=1.0, outbox_max_backoff_s=0.5)
    yield workspace
    await workspace.stop()


def delivered_once(slack: FakeSlack, thread_ts: str) -> None:
    thread = [m for m in slack.thread(CHANNEL, thread_ts) if m.get("bot")]
    progress = [m for m in thread if "step" in all_text(m)]
    answers = [m for m in thread if ANSWER_MARK in all_text(m) and "step" not in all_text(m)]
    assert len(progress) == 1, [all_text(m)[:60] for m in thread]
    assert ":white_check_mark: Done" in all_text(progress[0]) and progress[0]["blocks"][-1]["type"] != "actions"
    assert len(answers) == 1, [all_text(m)[:60] for m in thread]


async def test_slack_failing_at_the_start_of_a_run(ws: Workspace) -> None:
    ws.slack.fault("error", "chat.postMessage", "chat.update", for_s=1.5, status=503)
    await ws.sender.event(mention(CHANNEL, "UREQ", QUESTION, "10.1"))
    await ws.settle(30)
    delivered_once(ws.slack, "10.1")
    assert ws.service.metrics.value("opspilot_outbox_retries_total") >= 1


async def test_slack_failing_when_the_answer_is_due(ws: Workspace) -> None:
    async def fail_after_the_first_post(change: dict) -> None:
        if change["type"] == "message" and not ws.slack.faults:  # the progress message is up: now Slack fails
            ws.slack.fault("error", "chat.postMessage", "chat.update", for_s=1.5, status=500)

    ws.slack.watchers.append(fail_after_the_first_post)
    await ws.sender.event(mention(CHANNEL, "UREQ", QUESTION, "12.1"))
    await ws.settle(30)
    delivered_once(ws.slack, "12.1")
    assert ws.slack.faults and ws.service.metrics.value("opspilot_outbox_retries_total") >= 1


async def test_requests_that_hang_past_the_client_timeout(ws: Workspace) -> None:
    ws.slack.fault("hang", "chat.postMessage", "chat.update", times=3, hang_s=2.5)
    await ws.sender.event(mention(CHANNEL, "UREQ", QUESTION, "13.1"))
    await ws.settle(40)
    delivered_once(ws.slack, "13.1")


async def test_a_post_that_landed_but_whose_answer_was_lost_is_not_posted_twice(ws: Workspace) -> None:
    ws.slack.fault("lost", "chat.postMessage", times=3)
    await ws.sender.event(mention(CHANNEL, "UREQ", QUESTION, "14.1"))
    await ws.settle(30)
    delivered_once(ws.slack, "14.1")
    assert ws.service.metrics.value("opspilot_outbox_duplicates_avoided_total") >= 1


async def test_a_429_storm(ws: Workspace) -> None:
    ws.slack.rate_limit_next("chat.postMessage", 2)
    ws.slack.rate_limit_next("chat.update", 2)
    await ws.sender.event(mention(CHANNEL, "UREQ", QUESTION, "15.1"))
    await ws.settle(40)
    delivered_once(ws.slack, "15.1")


async def test_the_in_process_outbox_orders_and_supersedes() -> None:
    outbox = MemoryStore().outbox
    await outbox.put("t", "a", {"text": "one"}, due=0)
    await outbox.put("t", "b", {"text": "two"}, due=0)
    await outbox.put("t", "a", {"text": "one, edited"}, due=0)
    records = await outbox.records("t")
    assert [(r.key, r.version, r.get("text")) for r in records] == [("a", 2, "one, edited"), ("b", 1, "two")]
    await outbox.patch("t", "a", {"ts": "1.1"}, delivered=2)
    await outbox.patch("t", "b", {"ts": "1.2"}, delivered=1)
    assert not await outbox.settle("t", retry_at=0) and await outbox.due(10) == []
    assert [r.get("ts") for r in await outbox.records("t")] == ["1.1", "1.2"]
    assert (await outbox.records("t"))[0].get("text") is None  # delivered text is not kept


async def test_the_redis_outbox_keeps_a_state_put_during_delivery(ws: Workspace) -> None:
    outbox = ws.store.outbox
    await outbox.put("c:1", "m", {"text": "v1"}, due=0)
    (record,) = await outbox.records("c:1")
    await outbox.put("c:1", "m", {"text": "v2"}, due=0)  # a newer state arrives while v1 is being sent
    await outbox.patch("c:1", "m", {"ts": "9.9"}, delivered=record.version)
    assert await outbox.settle("c:1", retry_at=0)  # still due: v2 is not delivered
    (after,) = await outbox.records("c:1")
    assert (after.dirty, after.get("text"), after.get("ts")) == (True, "v2", "9.9")
    assert await ws.store.client.ttl(ws.store.keys.outbox("c:1")) > 0
    assert await ws.store.client.ttl(ws.store.keys.outbox_due(shard_of("c:1"))) > 0
    await outbox.patch("c:1", "m", {}, delivered=after.version)  # nothing left for the workspace to deliver
    assert not await outbox.settle("c:1", retry_at=0)


async def test_time_waiting_for_slack_does_not_count_against_a_run(redis_url: str, prefix: str,
                                                                   slack: FakeSlack) -> None:
    """Slack paced hard (one post every 2 s in the channel): runs need ~0 s of work each and all finish."""
    from bot.agent.limits import Limits
    from bot.agent.models.scripted import ScriptedModel, reply

    model = ScriptedModel([reply("fine") for _ in range(4)])
    ws = await open_workspace(redis_url, prefix, slack, model=model, specs=[], limits=Limits(max_wall_time_s=1.0),
                              posts_per_second=0.5)
    try:
        for i in range(4):
            await ws.sender.event(mention(CHANNEL, f"U{i}", "hello", f"50.{i}"))
        await ws.settle(60)
        stats = await ws.store.stats(3600)
        assert stats.stop_reasons == {"final_answer": 4}
        for i in range(4):
            assert any(all_text(m).split() == ["fine", "fine"] for m in ws.slack.thread(CHANNEL, f"50.{i}"))
    finally:
        await ws.stop()


async def test_messages_recorded_in_the_same_millisecond_keep_their_order(ws: Workspace) -> None:
    outbox = ws.store.outbox
    for i in range(30):
        await outbox.put("c:order", f"m{i}", {"text": "x" * 200}, due=0)
    assert [r.key for r in await outbox.records("c:order")] == [f"m{i}" for i in range(30)]
    for r in await outbox.records("c:order"):
        await outbox.patch("c:order", r.key, {}, delivered=r.version)
    assert not await outbox.settle("c:order", retry_at=0)


async def test_a_message_slack_refuses_for_good_does_not_hold_up_the_thread(ws: Workspace) -> None:
    ws.slack.fault("refuse", "chat.postMessage", times=1, error="restricted_action_thread_locked")
    await ws.service.outbox.say(CHANNEL, "60.1", "first", key="say:first")
    await ws.service.outbox.say(CHANNEL, "60.1", "second", key="say:second")
    await ws.settle(10)
    texts = [all_text(m) for m in ws.slack.thread(CHANNEL, "60.1")]
    assert texts == ["second\nsecond"] and ws.service.metrics.value("opspilot_outbox_dropped_total") == 1


async def test_a_landed_post_is_found_in_a_long_thread(ws: Workspace) -> None:
    for i in range(250):
        ws.slack.post_as_user(CHANNEL, "UX", f"chatter {i}", thread_ts="61.1")
    ws.slack.fault("lost", "chat.postMessage", times=1)
    await ws.service.outbox.say(CHANNEL, "61.1", "the answer", key="say:answer")
    await ws.settle(10)
    assert len([m for m in ws.slack.thread(CHANNEL, "61.1") if m.get("bot")]) == 1


async def test_a_post_outside_a_thread_whose_answer_was_lost_is_posted_once(ws: Workspace) -> None:
    for i in range(250):  # a busy channel: the look reads it in pages, newest first
        ws.slack.post_as_user(CHANNEL, "UX", f"chatter {i}")
    ws.slack.fault("lost", "chat.postMessage", times=1)
    await ws.service.outbox.say(CHANNEL, None, "Many alerts at once", key="say:storm")
    await ws.settle(10)
    posted = [m for (c, _), m in ws.slack.messages.items() if c == CHANNEL and m.get("bot")]
    assert [all_text(m) for m in posted] == ["Many alerts at once\nMany alerts at once"]
    assert ws.service.metrics.value("opspilot_outbox_duplicates_avoided_total") == 1
    assert all(call.get("oldest") for call in ws.slack.called("conversations.history"))  # from the first attempt on


class _AnswerDuringRound(RedisOutbox):
    """A round reads the thread, then an answer is recorded before its settle: the race, every time."""

    then: Callable[[], Awaitable[None]] | None = None

    async def records(self, thread: str) -> list[OutboxRecord]:
        rows = await super().records(thread)
        if self.then is not None:
            then, self.then = self.then, None
            await then()
        return rows


async def test_an_answer_recorded_while_a_round_waits_out_a_progress_edit_is_posted_at_once(
        store: RedisStore, slack: FakeSlack) -> None:
    """Progress edits here wait 30 s apart. A round that found only such an edit used to set the thread's next
    attempt to the edit's: an answer recorded meanwhile waited those 30 s with it. (Every shard's index is read
    once a minute here: the round's own process must come back for the answer, not a later scan.)"""
    inner = _AnswerDuringRound(store.client, store.keys, store.ttls)
    outbox = SlackOutbox(store=inner, pacer=Pacer(posts_per_second=50), metrics=Metrics(), update_interval_s=30.0,
                         client=AsyncWebClient(token=slack.token, base_url=slack.api_url, timeout=1), poll_s=60.0)
    outbox.start()
    try:
        await outbox.message("progress:r1", "C1", "41.1", "step 1", [kit.mrkdwn("step 1")])
        await until(lambda: len(slack.called("chat.postMessage")) == 1)
        inner.then = lambda: outbox.message("answer:r1", "C1", "41.1", "the answer", [kit.mrkdwn("the answer")])
        await outbox.message("progress:r1", "C1", "41.1", "step 2", [kit.mrkdwn("step 2")])  # its edit waits
        await until(lambda: any("the answer" in all_text(m) for m in slack.thread("C1", "41.1")))
        assert inner.then is None and slack.called("chat.update") == []  # the edit still waits its 30 s
    finally:
        await outbox.stop()


async def test_a_front_leaves_a_thread_to_its_writer_and_takes_it_over_once_left(store: RedisStore,
                                                                                  slack: FakeSlack) -> None:
    """A front writes no message of its own: its scan leaves a freshly due thread to the worker that wrote it
    (the front's event loop stays on Slack's acknowledgements), and takes one left due for longer than its
    takeover delay (the worker died right after its write)."""
    def outbox(takeover_after_s: float) -> SlackOutbox:
        return SlackOutbox(store=store.outbox, pacer=Pacer(posts_per_second=50), metrics=Metrics(), poll_s=60.0,
                           client=AsyncWebClient(token=slack.token, base_url=slack.api_url, timeout=1),
                           takeover_after_s=takeover_after_s)

    worker, front = outbox(0.0), outbox(1.0)  # the worker never delivers: it is gone after its write
    written = time.time()
    await worker.message("answer:r1", "C1", "42.1", "the answer", [kit.mrkdwn("the answer")])
    await front.deliver_due()
    assert not front._busy and slack.called("chat.postMessage") == []  # due, but its writer's to deliver

    try:
        for _ in range(400):  # a scan every 50 ms until the front takes the thread over
            await front.deliver_due()
            await until(lambda: not front._busy)
            if slack.called("chat.postMessage"):
                break
            await asyncio.sleep(0.05)
        assert time.time() - written >= 1.0  # not before the takeover delay
        await until(lambda: not front._busy)
        posted = [m for m in slack.thread("C1", "42.1") if m.get("bot")]
        assert len(posted) == 1 and "the answer" in all_text(posted[0])
    finally:
        await front.stop()
