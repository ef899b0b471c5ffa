"""Pacing under Slack's limits: token buckets per workspace (per channel for posts), counted in Redis across
processes, with progress edits leaving room for cards and answers."""

from __future__ import annotations

import asyncio
import time

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from bot.demo.workspace import TEAM
from bot.demo.workspace import LocalSlack as FakeSlack
from bot.slack.outbound import blocks as kit
from bot.slack.outbound.counters import Metrics
from bot.slack.outbound.outbox import SlackOutbox
from bot.slack.outbound.pacer import Pacer
from state import Keys, MemoryStore, RedisStore, connect
from state.outbox_store import RedisOutbox
from state.pacing import RedisPacing
from state.store import Outbox
from tests.conftest import free_port, until


async def test_posts_are_spaced_per_channel_and_updates_allow_a_burst() -> None:
    pacer = Pacer(posts_per_second=2, post_burst=1, updates_per_minute=60, update_burst=3)
    posts = [await pacer.delay("chat.postMessage", "C1") for _ in range(4)]
    assert posts[0] == 0 and [round(d, 1) for d in posts[1:]] == [0.5, 1.0, 1.5]
    assert await pacer.delay("chat.postMessage", "C2") == 0  # another channel has its own budget
    updates = [await pacer.delay("chat.update", "C1") for _ in range(5)]
    assert updates[:3] == [0, 0, 0] and [round(d, 1) for d in updates[3:]] == [1.0, 2.0]
    assert await pacer.delay("chat.postEphemeral", "C1") == 0


async def test_waiting_callers_are_served_in_order_at_the_rate() -> None:
    pacer = Pacer(posts_per_second=20, post_burst=1, updates_per_minute=6000)
    done: list[float] = []

    async def post() -> None:
        await pacer.wait("chat.postMessage", "C1")
        done.append(time.monotonic())

    start = time.monotonic()
    await asyncio.gather(*(post() for _ in range(5)))
    assert done[-1] - start >= 4 / 20 - 0.01
    assert await Pacer(posts_per_second=0).delay("chat.postMessage", "C1") == 0  # disabled


async def test_progress_edits_leave_edit_slots_for_cards_and_never_queue() -> None:
    pacer = Pacer(updates_per_minute=60, update_burst=5)
    assert [await pacer.edit_slot("progress:r1", "chat.update") for _ in range(3)] == [0, 0, 0]
    refused = await pacer.edit_slot("progress:r2", "chat.update")
    assert 0.9 < refused <= 1.0  # not taken: two slots stay for what must go; the next comes in a second
    assert await pacer.edit_slot("card:t1", "chat.update") == 0  # a card reserves its slot when it is sent
    assert [await pacer.delay("chat.update") for _ in range(2)] == [0, 0]  # the two kept for cards
    assert round(await pacer.delay("chat.update"), 1) == 1.0  # then in line, at the rate
    assert await pacer.edit_slot("progress:r1", "chat.update") > 2  # progress waits behind the queued card


async def test_other_edits_leave_a_slot_for_cards_and_never_queue() -> None:
    """An answer brought up to date, a Stop message ended: they go only while a slot stays for cards, and come
    back later rather than wait in line ahead of one (the soak's cards waited behind them: p95 73 s)."""
    pacer = Pacer(updates_per_minute=60, update_burst=5)
    assert [await pacer.edit_slot(f"answer:r{i}:0", "chat.update") for i in range(4)] == [0, 0, 0, 0]
    assert 0.9 < await pacer.edit_slot("answer:r9:0", "chat.update") <= 1.0  # refused: one is a card's
    assert await pacer.edit_slot("progress:r1", "chat.update") > 1.9  # progress behind both
    assert await pacer.edit_slot("card:t1", "chat.update") == 0
    assert await pacer.delay("chat.update") == 0  # the card takes the slot kept for it, at once
    assert await pacer.edit_slot("answer:r9:0", "chat.update") > 1.9  # and the answer comes after the card


@pytest.fixture(params=["redis", "cluster"])
def shared_store(request: pytest.FixtureRequest) -> RedisStore:
    """A store on one Redis and on a Redis Cluster (each bucket one key, so each script one slot)."""
    store: RedisStore = request.getfixturevalue("store" if request.param == "redis" else "cluster_store")
    return store


async def test_processes_share_one_budget_per_workspace(shared_store: RedisStore) -> None:
    shared = RedisPacing(shared_store.client, shared_store.keys)
    a, b = (Pacer(posts_per_second=1, updates_per_minute=1, update_burst=4, shared=shared, workspace=TEAM)
            for _ in range(2))
    assert [await a.edit_slot("progress:r1", "chat.update"), await b.edit_slot("progress:r2", "chat.update")] == [0, 0]
    assert await a.edit_slot("progress:r1", "chat.update") > 30  # two left: kept for cards, whoever sends them
    assert [await b.delay("chat.update"), await a.delay("chat.update")] == [0, 0]
    assert 59 < await a.delay("chat.update") <= 60  # the workspace's burst is spent, by both together
    assert await b.delay("chat.postMessage", "C1") == 0
    assert await a.delay("chat.postMessage", "C1") > 0.9  # one channel's posts, one pace
    assert await a.delay("chat.postMessage", "C2") == 0
    other = Pacer(updates_per_minute=1, update_burst=4, shared=shared, workspace="T0002")
    assert await other.delay("chat.update") == 0  # another workspace, another budget
    keys = [shared_store.keys.pace(TEAM, "chat.update"), shared_store.keys.pace(TEAM, "post:C1")]
    assert [await shared_store.client.pttl(k) > 0 for k in keys] == [True, True]  # gone once full again


async def test_without_redis_each_process_paces_itself_and_nothing_waits_for_redis() -> None:
    dead = connect(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.5)
    pacer = Pacer(posts_per_second=2, shared=RedisPacing(dead, Keys("test")), workspace=TEAM)
    start = time.monotonic()
    assert await pacer.delay("chat.postMessage", "C1") == 0
    assert round(await pacer.delay("chat.postMessage", "C1"), 1) == 0.5  # paced in process
    assert time.monotonic() - start < 1.5
    await dead.aclose()


def _outbox(store: RedisStore, slack: FakeSlack, *, own: Outbox | None = None, **pace: float) -> SlackOutbox:
    """An outbox pacing on ``store``'s Redis; ``own``: the messages it delivers, if not the store's."""
    pacer = Pacer(shared=RedisPacing(store.client, store.keys), workspace=TEAM, **pace)  # type: ignore[arg-type]
    outbox = SlackOutbox(store=own or store.outbox, client=AsyncWebClient(token=slack.token, base_url=slack.api_url),
                         pacer=pacer, metrics=Metrics(), update_interval_s=0.05, poll_s=0.2)
    outbox.start()
    return outbox


async def _say(outbox: SlackOutbox, key: str, channel: str, thread_ts: str, text: str) -> None:
    await outbox.message(key, channel, thread_ts, text, [kit.mrkdwn(text)])


async def _ts(store: RedisStore, thread: str, key: str) -> str | None:
    return next((r.get("ts") for r in await store.outbox.records(thread) if r.key == key), None)


async def test_two_processes_stay_within_slacks_budget_together(store: RedisStore, slack: FakeSlack) -> None:
    """Two processes, each delivering its own threads into one workspace: what Slack counts stays within what it
    allows (a rolling minute of chat.update; posts per channel), where each process pacing alone would go over."""
    slack.per_minute("chat.update", 5)  # the pacers' burst (4) plus a minute of their rate (1)
    slack.posts_per_channel(1, 0.6)  # the pacers post once a second per channel
    own = [RedisOutbox(store.client, Keys(f"{store.keys.prefix}:{name}"), store.ttls) for name in "ab"]
    outboxes = [_outbox(store, slack, own=mine, posts_per_second=1, updates_per_minute=1, update_burst=4)
                for mine in own]
    threads = [(outbox, f"C{i}", f"7.{i}{n}") for n, outbox in enumerate(outboxes) for i in range(3)]
    try:
        for outbox, channel, ts in threads:  # each channel: one thread of each process
            await _say(outbox, f"progress:r{ts}", channel, ts, "step 1")
        await until(lambda: len(slack.called("chat.postMessage")) >= 6 or slack.rate_limited > 0, 20)
        for outbox, channel, ts in threads:
            await _say(outbox, f"progress:r{ts}", channel, ts, "step 2")

        async def quiet() -> bool:  # nothing to try for half a minute: every edit sent or waiting for its turn
            return not any([await mine.due(time.time() + 30) for mine in own])

        for _ in range(600):  # up to 30 s
            if slack.rate_limited or await quiet():
                break
            await asyncio.sleep(0.05)
        assert slack.rate_limited == 0
        assert len(slack.called("chat.postMessage")) == 6
        assert len(slack.called("chat.update")) == 2  # the burst less the two slots kept for cards
    finally:
        for outbox in outboxes:
            await outbox.stop()


@pytest.mark.parametrize("backlog", ["progress:r{}", "answer:r{}:0"])
async def test_cards_close_ahead_of_a_backlog_of_edits(store: RedisStore, slack: FakeSlack, backlog: str) -> None:
    """Many runs' progress (or answers) waiting for the edit budget, then three decisions: the cards that show them
    go in the next slots, not after the backlog (the soak saw cards still showing Confirm minutes after the click)."""
    outbox = _outbox(store, slack, posts_per_second=50, updates_per_minute=60, update_burst=5)
    runs, cards = 24, 3
    try:
        for i in range(runs):
            await _say(outbox, backlog.format(i), "C1", f"8.{i:02}", "step 1")
        for i in range(runs - cards, runs):  # each in its run's thread, under its progress
            await _say(outbox, f"card:t{i}", "C1", f"8.{i:02}", "Confirm restarting payments?")
        await until(lambda: len(slack.called("chat.postMessage")) == runs + cards, 20)
        for i in range(runs):
            await _say(outbox, backlog.format(i), "C1", f"8.{i:02}", "step 2")
        await until(lambda: len(slack.called("chat.update")) >= 4, 20)  # the budget is down to what cards keep

        before = len(slack.called("chat.update"))
        for i in range(runs - cards, runs):
            await _say(outbox, f"card:t{i}", "C1", f"8.{i:02}", "Confirmed by @Bob")
        card_ts = {await _ts(store, f"C1:8.{i:02}", f"card:t{i}") for i in range(runs - cards, runs)}
        await until(lambda: card_ts <= {u.get("ts") for u in slack.called("chat.update")}, 60)

        after = [u.get("ts") for u in slack.called("chat.update")][before:]
        last_card = max(after.index(ts) for ts in card_ts)
        ahead = len([ts for ts in after[:last_card] if ts not in card_ts])  # progress edits sent meanwhile
        assert runs - before >= 15 and ahead <= 1, (runs - before, ahead)
    finally:
        await outbox.stop()


async def test_a_progress_messages_last_state_goes_ahead_of_progress_still_moving(store: RedisStore,
                                                                                  slack: FakeSlack) -> None:
    """Many runs' progress edits waiting for the edit budget, then three runs end: their progress messages' last
    state (no Stop button any more) goes in the next slots, not after the others' intermediate steps (the soak at
    issue scale left hundreds of finished runs' progress showing "working" behind edits of runs still moving)."""
    outbox = _outbox(store, slack, posts_per_second=50, updates_per_minute=60, update_burst=5)
    runs, ended = 24, 3
    try:
        for i in range(runs):
            await _say(outbox, f"progress:r{i}", "C1", f"11.{i:02}", "step 1")
        await until(lambda: len(slack.called("chat.postMessage")) == runs, 20)
        for i in range(runs):
            await _say(outbox, f"progress:r{i}", "C1", f"11.{i:02}", "step 2")
        await until(lambda: len(slack.called("chat.update")) >= 3, 20)  # the budget is down to what others keep

        before = len(slack.called("chat.update"))
        for i in range(runs - ended, runs):
            await outbox.message(f"progress:r{i}", "C1", f"11.{i:02}", "Done", [kit.mrkdwn("Done")], settled=True)
        done_ts = {await _ts(store, f"C1:11.{i:02}", f"progress:r{i}") for i in range(runs - ended, runs)}
        await until(lambda: done_ts <= {u.get("ts") for u in slack.called("chat.update") if u.get("text") == "Done"},
                    60)
        after = [u for u in slack.called("chat.update")][before:]
        last = max(n for n, u in enumerate(after) if u.get("text") == "Done")
        ahead = len([u for u in after[:last] if u.get("text") != "Done"])  # moving progress sent meanwhile
        assert runs - before >= 15 and ahead <= 1, (runs - before, ahead)
    finally:
        await outbox.stop()


async def test_an_urgent_message_brings_a_waiting_thread_forward(store: RedisStore) -> None:
    """A thread waiting out a backoff (or a progress edit's turn) keeps its time for a newer progress state, but
    not for a card: that is due at once."""
    for outbox in (store.outbox, MemoryStore().outbox):
        await outbox.put("C1:9.1", "progress:r1", {"text": "step 1"}, due=time.time())
        await outbox.settle("C1:9.1", retry_at=time.time() + 30)
        await outbox.put("C1:9.1", "progress:r1", {"text": "step 2"}, due=time.time())
        assert await outbox.due(time.time()) == []
        await outbox.put("C1:9.1", "card:t1", {"text": "Confirmed by @Bob"}, due=time.time(), urgent=True)
        assert await outbox.due(time.time()) == ["C1:9.1"]


async def test_turns_reserved_by_a_process_that_died_do_not_hold_a_channel_up(store: RedisStore,
                                                                               slack: FakeSlack) -> None:
    """Posts reserve their turn in the channel's budget, in Redis, for every process; a process killed while its
    deliveries wait takes their turns with it. The soak's alert storm (~100 posts in one channel, a process killed
    every 10 s) crawled at a tenth of Slack's pace behind such turns. A delivery now reserves only a few seconds
    ahead: another process's posts in that channel go within those seconds of the death, not after the dead line."""
    own = [RedisOutbox(store.client, Keys(f"{store.keys.prefix}:{name}"), store.ttls) for name in "ab"]
    dying = _outbox(store, slack, own=own[0], posts_per_second=2, updates_per_minute=60)
    for i in range(40):  # 20 s of this channel's turns, were they all reserved
        await _say(dying, f"alert-offer:{i}", "C1", f"9.{i:02}", "Investigate?")
    await until(lambda: len(slack.called("chat.postMessage")) >= 2, 20)
    await dying.stop()  # its deliveries end in their waits, as a process killed -9 does (their turns not given back)
    died = time.monotonic()
    alive = _outbox(store, slack, own=own[1], posts_per_second=2, updates_per_minute=60)
    try:
        before = len(slack.called("chat.postMessage"))
        for i in range(3):
            await _say(alive, f"answer:r{i}:0", "C1", f"10.{i}", "done")
        await until(lambda: len(slack.called("chat.postMessage")) >= before + 3, 30)
        assert time.monotonic() - died < 10, time.monotonic() - died  # ≤ the horizon (5 s) and their own 1.5 s
    finally:
        await alive.stop()
